// expect: graph_has_input<.*"y".*false>
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  auto g = make_graph(sum(x));
  return g.feed<"y">(tensor<float>({2, 3}));
}
