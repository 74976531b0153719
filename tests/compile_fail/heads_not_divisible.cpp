// expect: multi-head attention: the model dim must be divisible by the number of heads
// max-bytes: 4096
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<30>>>();
  return make_graph(nn::self_attention<"attn", 4>(x));
}
