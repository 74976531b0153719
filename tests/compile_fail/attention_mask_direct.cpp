// expect: attention: a mask does not fit the scores.*mask_fits_scores<loom::shape<loom::dyn<.*"S".*>, loom::dyn<.*"T".*> >, loom::shape<loom::dyn<.*"B".*>, loom::fix<4>, loom::dyn<.*"T".*>, loom::dyn<.*"S".*> >, false>
// max-bytes: 4096
// A bool mask [S, T] (axes swapped) given to nn::attention directly: the scores are [B, H, T, S].
// (This used to compile, the mask silently ignored.)
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
using namespace loom;
auto bad() {
  auto q = input<"q", shape<dyn<"B">, fix<4>, dyn<"T">, fix<8>>>();
  auto k = input<"k", shape<dyn<"B">, fix<4>, dyn<"S">, fix<8>>>();
  auto v = input<"v", shape<dyn<"B">, fix<4>, dyn<"S">, fix<8>>>();
  auto mask = input<"mask", shape<dyn<"S">, dyn<"T">>, bool>();
  return make_graph(nn::attention(q, k, v, nn::allowed(mask)));
}
