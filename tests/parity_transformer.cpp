// parity_runner's nn.Transformer cases: d_model 16, 4 heads, feed-forward 32, 2 + 2 layers, no
// dropout; inputs src_x [B, S, D], tgt_x [B, T, D], src_len [B] (PyTorch's
// src_key_padding_mask and memory_key_padding_mask); a causal tgt_mask. The state_dict is
// saved under "transformer." (the Transformer as a submodule). Names match scripts/parity.py.
#include <tuple>

#include "loom/loom.hpp"
#include "loom/nn/transformer.hpp"
#include "parity_support.hpp"

using namespace loom;

namespace parity {

namespace {

constexpr nn::transformer_config with(bool norm_first, nn::activation act) {
  return {.d_model = 16,
          .heads = 4,
          .ffn = 32,
          .encoder_layers = 2,
          .decoder_layers = 2,
          .norm_first = norm_first,
          .act = act};
}
constexpr auto post_relu = with(false, nn::activation::relu);
constexpr auto pre_relu = with(true, nn::activation::relu);
constexpr auto post_gelu = with(false, nn::activation::gelu);
constexpr auto pre_gelu = with(true, nn::activation::gelu);

constexpr pytorch::prefixes names{.loom = "", .torch = "transformer."};

template <nn::transformer_config C, class Masks = nn::default_transformer_masks>
gradient_case make(std::string name) {
  return {std::move(name),
          make_graph(nn::transformer_body<C, nn::eval_mode, Masks>::output()).plan(),
          module::transformer,
          names,
          {}};
}

// The six masks of nn.Transformer.forward, as loom inputs (bool: True may attend, the negation
// of PyTorch's; float: added to the scores).
using src_mask = nn::additive_t<input_node<"src_mask", shape<dyn<"S">, dyn<"S">>>>;
using tgt_mask = nn::allowed_t<input_node<"tgt_mask", shape<dyn<"T">, dyn<"T">>, bool>>;
using memory_mask = nn::additive_t<input_node<"memory_mask", shape<dyn<"T">, dyn<"S">>>>;
using src_keys = nn::allowed_t<input_node<"src_keys", shape<dyn<"B">, dyn<"S">>, bool>>;
using tgt_keys = nn::allowed_t<input_node<"tgt_keys", shape<dyn<"B">, dyn<"T">>, bool>>;
using memory_keys = nn::allowed_t<input_node<"memory_keys", shape<dyn<"B">, dyn<"S">>, bool>>;
template <class... M>
using list = type_list<M...>;

template <nn::transformer_config C>
decode_case make_decode(std::string name, long prefill) {
  using eval = nn::transformer_body<C, nn::eval_mode>;
  using step = nn::transformer_body<C, nn::decode_mode>;
  auto memory = std::apply([](auto... m) { return make_graph(m...); }, eval::cross_memory());
  return {std::move(name),
          memory.plan(),
          make_graph(step::output()).plan(),
          prefill,
          names};
}

}  // namespace

std::vector<gradient_case> transformer_cases() {
  using causal = nn::causal_t;
  return {make<post_relu>("transformer_post_relu"), make<pre_relu>("transformer_pre_relu"),
          make<post_gelu>("transformer_post_gelu"), make<pre_gelu>("transformer_pre_gelu"),
          make<post_relu, nn::transformer_masks<list<src_mask>, list<causal>, list<>>>("transformer_src_mask"),
          make<post_relu, nn::transformer_masks<list<>, list<tgt_mask>, list<>>>("transformer_tgt_mask_bool"),
          make<pre_relu, nn::transformer_masks<list<>, list<causal>, list<memory_mask>>>("transformer_memory_mask"),
          make<post_relu, nn::transformer_masks<list<src_keys>, list<causal>, list<>>>("transformer_src_key_padding"),
          make<pre_gelu, nn::transformer_masks<list<>, list<causal, tgt_keys>, list<>>>("transformer_tgt_key_padding"),
          make<post_gelu, nn::transformer_masks<list<>, list<causal>, list<memory_keys>>>(
              "transformer_memory_key_padding"),
          make<post_relu, nn::transformer_masks<list<src_mask, src_keys>, list<tgt_mask, tgt_keys>,
                                                list<memory_mask, memory_keys>>>("transformer_all_six_masks")};
}

std::vector<decode_case> decode_cases() {
  return {make_decode<post_relu>("transformer_post_relu_decode", 2),
          make_decode<pre_gelu>("transformer_pre_gelu_decode", 1)};
}

}  // namespace parity
