// expect: attention: with enable_gqa, q's heads Hq must be a multiple of k's and v's Hkv.*heads_divide<loom::fix<6>, loom::fix<4> >.+evaluates to false
// max-bytes: 4096
// Grouped-query attention with 6 query heads over 4 key/value heads: 4 does not divide 6.
// (This used to print 9 KB: the check, then two matmul errors from the path without groups.)
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
using namespace loom;
auto bad() {
  auto q = input<"q", shape<dyn<"B">, fix<6>, dyn<"T">, fix<8>>>();
  auto k = input<"k", shape<dyn<"B">, fix<4>, dyn<"S">, fix<8>>>();
  auto v = input<"v", shape<dyn<"B">, fix<4>, dyn<"S">, fix<8>>>();
  return make_graph(nn::attention<{.enable_gqa = true}>(q, k, v));
}
