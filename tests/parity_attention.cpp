// parity_runner's nn.MultiheadAttention cases: D = 8; inputs x [B, T, D], memory [B, S, D],
// len [B] (int: valid keys, PyTorch's key_padding_mask), mask [T, S] (bool: True may attend,
// the negation of PyTorch's bool attn_mask). Names match CASES in scripts/parity.py.
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "parity_support.hpp"

using namespace loom;

namespace parity {

namespace {

constexpr long D = 8;
using x = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>;
using memory = input_node<"memory", shape<dyn<"B">, dyn<"S">, fix<D>>>;
using len = input_node<"len", shape<dyn<"B">>, int>;
using self_mask = input_node<"mask", shape<dyn<"T">, dyn<"T">>, bool>;
using cross_mask = input_node<"mask", shape<dyn<"T">, dyn<"S">>, bool>;
using float_mask = input_node<"fmask", shape<dyn<"T">, dyn<"T">>>;                  // added to the scores
using seq_mask = input_node<"mask", shape<dyn<"B">, dyn<"T">, dyn<"T">>, bool>;      // per sequence
using key_mask = input_node<"keys", shape<dyn<"B">, dyn<"T">>, bool>;                // per key, True may attend
constexpr nn::mha_options no_bias{.bias = false};

template <class G>
gradient_case make(std::string name, G g, pytorch::attention_layout layout = pytorch::attention_layout::packed,
                   bool biases = true) {
  return {std::move(name),
          g.plan(),
          module::multihead_attention,
          {.loom = "attn", .torch = ""},
          {.layout = layout, .biases = biases}};
}

}  // namespace

std::vector<gradient_case> attention_cases() {
  using enum pytorch::attention_layout;
  return {
      make("mha_self_h1", make_graph(nn::self_attention<"attn", 1>(x{}))),
      make("mha_self_h2_causal", make_graph(nn::self_attention<"attn", 2>(x{}, nn::causal))),
      make("mha_self_h4_boolmask", make_graph(nn::self_attention<"attn", 4>(x{}, nn::allowed(self_mask{})))),
      make("mha_self_h2_padding", make_graph(nn::self_attention<"attn", 2>(x{}, nn::padding(len{})))),
      make("mha_self_h4_causal_padding_separate",
           make_graph(nn::self_attention<"attn", 4>(x{}, nn::causal, nn::padding(len{}))), separate),
      make("mha_self_h1_causal_nobias", make_graph(nn::self_attention<"attn", 1>(x{}, nn::causal)), packed, false),
      make("mha_cross_h1_padding", make_graph(nn::cross_attention<"attn", 1>(x{}, memory{}, nn::padding(len{})))),
      make("mha_cross_h2_boolmask_separate",
           make_graph(nn::cross_attention<"attn", 2>(x{}, memory{}, nn::allowed(cross_mask{}))), separate),
      make("mha_cross_h4_padding", make_graph(nn::cross_attention<"attn", 4>(x{}, memory{}, nn::padding(len{})))),
      // loom layers without biases (mha_options{.bias = false}) against PyTorch's bias=False
      make("mha_self_h2_causal_bias_false", make_graph(nn::self_attention<"attn", 2, no_bias>(x{}, nn::causal)), packed,
           false),
      make("mha_cross_h2_padding_bias_false",
           make_graph(nn::cross_attention<"attn", 2, no_bias>(x{}, memory{}, nn::padding(len{}))), packed, false),
      make("mha_self_h2_float_mask", make_graph(nn::self_attention<"attn", 2>(x{}, nn::additive(float_mask{})))),
      make("mha_self_h2_mask_per_sequence", make_graph(nn::self_attention<"attn", 2>(x{}, nn::allowed(seq_mask{})))),
      make("mha_self_h4_key_mask_holes", make_graph(nn::self_attention<"attn", 4>(x{}, nn::allowed(key_mask{})))),
      // A key_padding_mask that hides every key of sequence 1: PyTorch gives NaN, loom zero weights.
      make("mha_fully_masked_rows", make_graph(nn::self_attention<"attn", 2>(x{}, nn::padding(len{})))),
  };
}

}  // namespace parity
