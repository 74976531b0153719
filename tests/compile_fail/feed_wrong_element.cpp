// expect: input_takes<.*"tokens".*float>
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto tokens = input<"tokens", shape<fix<2>>, int>();
  auto w = param<"w", shape<fix<5>, fix<3>>>();
  auto g = make_graph(sum(embedding(tokens, w)));
  return g.feed<"tokens">(tensor<float>({2}));
}
