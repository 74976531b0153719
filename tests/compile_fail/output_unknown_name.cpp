// expect: graph_has_named_output<.*"hiden".*false>
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad(const executor<float>& run) {
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  auto g = make_graph(sum(named<"hidden">(relu(x))));
  return g.output<"hiden">(run);  // a misspelt name
}
