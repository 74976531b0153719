// expect: matmul: inner dims differ.*inner_dims_match<loom::fix<64>, loom::fix<32> >.+evaluates to false
// max-bytes: 4096
// A shape error at the end of a six-layer attention stack: the message stays a few kilobytes
// because every layer's output is a block (its type names its input once).
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<64>>>();
  auto h1 = nn::self_attention<"l1", 4>(x, nn::causal);
  auto h2 = nn::self_attention<"l2", 4>(h1, nn::causal);
  auto h3 = nn::self_attention<"l3", 4>(h2, nn::causal);
  auto h4 = nn::self_attention<"l4", 4>(h3, nn::causal);
  auto h5 = nn::self_attention<"l5", 4>(h4, nn::causal);
  auto h6 = nn::self_attention<"l6", 4>(h5, nn::causal);
  auto w = param<"head.weight", shape<fix<32>, fix<10>>>();
  return make_graph(matmul(h6, w));
}
