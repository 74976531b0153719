// expect: the operands' shapes do not broadcast.*operands_broadcast<loom::mul_op, loom::shape<loom::fix<2>, loom::fix<3> >, loom::shape<loom::fix<3>, loom::fix<2> > >
// max-bytes: 4000
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  auto t = input<"t", shape<fix<3>, fix<2>>>();
  return mul(x, t);
}
