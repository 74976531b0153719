// expect: cross-attention: memory \[B, S, D\] must have the model dim D of the queries.*model_dims_match<loom::fix<8>, loom::fix<16> >.+evaluates to false
// max-bytes: 4096
// Queries of width 8 against a memory of width 16. (This used to print 17 KB: the check from
// inside the layer, then a matmul error.)
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<8>>>();
  auto mem = input<"mem", shape<dyn<"B">, dyn<"S">, fix<16>>>();
  return make_graph(nn::cross_attention<"attn", 2>(x, mem));
}
