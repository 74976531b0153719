// expect: attention: a mask does not fit the scores.*mask_fits_scores<loom::shape<loom::dyn<.*"S".*>, loom::dyn<.*"T".*> >, loom::shape<loom::dyn<.*"B".*>, loom::fix<2>, loom::dyn<.*"T".*>, loom::dyn<.*"S".*> >, false>
// max-bytes: 4000
// A float mask [S, T] given where the cross-attention scores are [B, H, T, S] (axes swapped).
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<8>>>();
  auto mem = input<"mem", shape<dyn<"B">, dyn<"S">, fix<8>>>();
  auto mask = input<"mask", shape<dyn<"S">, dyn<"T">>>();
  return make_graph(nn::cross_attention<"attn", 2>(x, mem, nn::additive(mask)));
}
