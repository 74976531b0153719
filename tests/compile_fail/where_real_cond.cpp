// expect: where: cond must be a bool input
// max-bytes: 4000
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto c = input<"c", shape<fix<3>>>();  // real, not bool
  auto a = input<"a", shape<fix<3>>>();
  return where(c, a, a);
}
