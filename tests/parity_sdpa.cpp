// parity_runner's scaled-dot-product attention cases: nn::attention<O>(q, k, v, masks...) with
// q [B, Hq, T, d], k [B, Hkv, S, d], v [B, Hkv, S, dv] (d 4, dv 3), masks "mask" (bool, True
// may attend), "fmask" (float, added), "len" (int64 lengths), dropout's "seed". PyTorch 1.13 has
// no F.scaled_dot_product_attention: scripts/parity.py writes its math out (sdpa_reference).
// Names match SDPA_CASES there.
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "parity_support.hpp"

using namespace loom;

namespace parity {

namespace {

template <long H>
using q_in = input_node<"q", shape<dyn<"B">, fix<H>, dyn<"T">, fix<4>>>;
template <long H>
using k_in = input_node<"k", shape<dyn<"B">, fix<H>, dyn<"S">, fix<4>>>;
template <long H>
using v_in = input_node<"v", shape<dyn<"B">, fix<H>, dyn<"S">, fix<3>>>;
using len = input_node<"len", shape<dyn<"B">>, std::int64_t>;
using seed = input_node<"seed", shape<fix<2>>, int>;
using bool_ts = input_node<"mask", shape<dyn<"T">, dyn<"S">>, bool>;
using bool_b1ts = input_node<"mask", shape<dyn<"B">, fix<1>, dyn<"T">, dyn<"S">>, bool>;
using float_ts = input_node<"fmask", shape<dyn<"T">, dyn<"S">>>;
using float_b1ts = input_node<"fmask", shape<dyn<"B">, fix<1>, dyn<"T">, dyn<"S">>>;
template <long H>
using float_bhts = input_node<"fmask", shape<dyn<"B">, fix<H>, dyn<"T">, dyn<"S">>>;

template <class G>
gradient_case make(std::string name, G g) {
  return {std::move(name), g.plan(), module::none, {}, {}};
}

}  // namespace

std::vector<gradient_case> sdpa_cases() {
  using nn::attention;
  return {
      make("sdpa_default", make_graph(attention(q_in<2>{}, k_in<2>{}, v_in<2>{}))),
      make("sdpa_scale", make_graph(attention<{.scale = 0.3}>(q_in<2>{}, k_in<2>{}, v_in<2>{}))),
      make("sdpa_causal", make_graph(attention<{.is_causal = true}>(q_in<2>{}, k_in<2>{}, v_in<2>{}))),
      make("sdpa_bool_ts", make_graph(attention(q_in<2>{}, k_in<2>{}, v_in<2>{}, nn::allowed(bool_ts{})))),
      make("sdpa_bool_b1ts", make_graph(attention(q_in<2>{}, k_in<2>{}, v_in<2>{}, nn::allowed(bool_b1ts{})))),
      make("sdpa_float_ts", make_graph(attention(q_in<2>{}, k_in<2>{}, v_in<2>{}, nn::additive(float_ts{})))),
      make("sdpa_float_b1ts", make_graph(attention(q_in<2>{}, k_in<2>{}, v_in<2>{}, nn::additive(float_b1ts{})))),
      make("sdpa_float_bhts", make_graph(attention(q_in<2>{}, k_in<2>{}, v_in<2>{}, nn::additive(float_bhts<2>{})))),
      make("sdpa_padding_int64", make_graph(attention(q_in<2>{}, k_in<2>{}, v_in<2>{}, nn::padding(len{})))),
      make("sdpa_gqa2_causal",
           make_graph(attention<{.is_causal = true, .enable_gqa = true}>(q_in<4>{}, k_in<2>{}, v_in<2>{}))),
      make("sdpa_gqa4_float_b1ts", make_graph(attention<{.enable_gqa = true}>(q_in<8>{}, k_in<2>{}, v_in<2>{},
                                                                              nn::additive(float_b1ts{})))),
      make("sdpa_mqa_bool_ts",
           make_graph(attention<{.enable_gqa = true}>(q_in<4>{}, k_in<1>{}, v_in<1>{}, nn::allowed(bool_ts{})))),
      make("sdpa_dropout",
           make_graph(attention<{.dropout = 0.3}>(q_in<2>{}, k_in<2>{}, v_in<2>{}, nn::dropout_seed(seed{})))),
      make("sdpa_all_options",
           make_graph(attention<{.scale = 0.5, .is_causal = true, .enable_gqa = true}>(
               q_in<4>{}, k_in<2>{}, v_in<2>{}, nn::allowed(bool_b1ts{}), nn::additive(float_bhts<4>{}),
               nn::padding(len{})))),
  };
}

}  // namespace parity
