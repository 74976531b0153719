// expect: attention: a mask does not fit the scores.*mask_fits_scores<loom::shape<loom::dyn<.*"T".*>, loom::dyn<.*"S".*> >, loom::shape<loom::dyn<.*"B".*>, loom::fix<4>, loom::dyn<.*"T".*>, loom::dyn<.*"T".*> >, false>
// max-bytes: 4000
// A self-attention mask whose key dim is named S: the scores are [B, H, T, T], so it cannot fit.
// (This used to print 17–30 KB from inside the layer.)
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<16>>>();
  auto mask = input<"mask", shape<dyn<"T">, dyn<"S">>, bool>();
  return make_graph(nn::self_attention<"attn", 4>(x, nn::causal, nn::allowed(mask)));
}
