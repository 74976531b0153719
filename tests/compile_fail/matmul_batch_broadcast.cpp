// expect: matmul: the batch dims of a and b do not broadcast.*batch_dims_match<loom::shape<loom::fix<2>, loom::fix<4> >, loom::shape<loom::fix<3>, loom::fix<1> > >
// max-bytes: 4000
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto q = input<"q", shape<fix<2>, fix<4>, fix<5>, fix<8>>>();
  auto k = input<"k", shape<fix<3>, fix<1>, fix<6>, fix<8>>>();
  return matmul<false, true>(q, k);
}
