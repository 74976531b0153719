// The cases of parity_runner (driven by scripts/parity.py): each names a loom graph, known at
// compile time, whose PyTorch counterpart the script builds under the same name.
#pragma once

#include <string>
#include <vector>

#include "loom/graph/plan.hpp"
#include "loom/io/torch_import.hpp"

namespace parity {

/// Which PyTorch module a case mirrors, and so which importer loads its state_dict.
enum class module { multihead_attention, transformer, none };  // none: no parameters (F.scaled_dot_product_attention)

/// A forward + backward case: output 0 of `plan` against the module's output, every gradient
/// against PyTorch's. Weights come from <case>/weights.safetensors under `names.torch`, are
/// loaded under `names.loom`, and go back (weights and gradients) with `back`.
struct gradient_case {
  std::string name;
  loom::plan_view plan;
  module kind;
  loom::pytorch::prefixes names;
  loom::pytorch::export_options back;
};

/// A decoding case: the decoder output of nn.Transformer over all target positions, computed
/// by loom as a prefill of `prefill` positions then one-token steps with a kv_cache.
struct decode_case {
  std::string name;
  loom::plan_view memory;  // eval_mode body: the projected cross-attention memory
  loom::plan_view step;    // decode_mode body: output() for new target positions
  long prefill;
  loom::pytorch::prefixes names;
};

std::vector<gradient_case> attention_cases();    // parity_attention.cpp
std::vector<gradient_case> sdpa_cases();         // parity_sdpa.cpp
std::vector<gradient_case> transformer_cases();  // parity_transformer.cpp
std::vector<decode_case> decode_cases();         // parity_transformer.cpp

}  // namespace parity
