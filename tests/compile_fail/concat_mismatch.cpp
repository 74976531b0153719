// expect: concat: operands must have the same rank and the same dims except along the axis
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto a = input<"a", shape<fix<2>, dyn<"P">, fix<8>>>();
  auto b = input<"b", shape<fix<2>, dyn<"T">, fix<4>>>();
  return concat<1>(a, b);
}
