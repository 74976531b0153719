// expect: add: the second operand's dims must equal the first's
// max-bytes: 6000
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"T">, fix<8>>>();
  auto b = input<"b", shape<fix<4>>>();
  return add(x, b);
}
