// expect: matmul: inner dims differ.*inner_dims_match<loom::fix<64>, loom::fix<32> >.+evaluates to false
// max-bytes: 4096
// A matmul of [T, 64] by [32, 64]: the contracted dims (64 and 32) differ.
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"T">, fix<64>>>();
  auto w = input<"w", shape<fix<32>, fix<64>>>();
  return make_graph(matmul(x, w));
}
