// expect: attention: the leading dims of q, k and v do not broadcast.*qkv_leads_broadcast<loom::shape<loom::dyn<.*"B".*>, loom::fix<6> >, loom::shape<loom::dyn<.*"B".*>, loom::fix<4> >, loom::shape<loom::dyn<.*"B".*>, loom::fix<4> > >.+evaluates to false
// max-bytes: 4096
// Six query heads over four key/value heads without enable_gqa: the heads must be equal.
// (This used to print two matmul errors, one for each product.)
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
using namespace loom;
auto bad() {
  auto q = input<"q", shape<dyn<"B">, fix<6>, dyn<"T">, fix<8>>>();
  auto k = input<"k", shape<dyn<"B">, fix<4>, dyn<"S">, fix<8>>>();
  auto v = input<"v", shape<dyn<"B">, fix<4>, dyn<"S">, fix<8>>>();
  return make_graph(nn::attention(q, k, v));
}
