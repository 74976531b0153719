// expect: make_graph: two different nodes have the same name
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  return make_graph(named<"y">(scale<2.0>(x)), named<"y">(scale<3.0>(x)));
}
