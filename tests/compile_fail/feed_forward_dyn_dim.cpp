// expect: nn::feed_forward: the model \(last\) dim must be fixed.*is_fixed_dim<loom::dyn<.*"D".*> >.+evaluates to false
// max-bytes: 4096
// A feed-forward over x [B, T, D] with D named, not fixed. (This used to print eight errors, 14 KB.)
#include "loom/loom.hpp"
#include "loom/nn/layers.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, dyn<"D">>>();
  return make_graph(nn::feed_forward<"ff", 32>(x));
}
