// expect: the operands' shapes do not broadcast.*operands_broadcast<loom::add_op, loom::shape<loom::dyn<.*"T".*loom::fix<8> >, loom::shape<loom::fix<4> > >
// max-bytes: 4000
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"T">, fix<8>>>();
  auto b = input<"b", shape<fix<4>>>();
  return add(x, b);
}
