// expect: reduction: Axis is not an axis of x.*reduces_an_axis<loom::mean_def, 2, 2>
// max-bytes: 4000
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  return mean<2>(x);  // axes are 0, 1 (or −2, −1)
}
