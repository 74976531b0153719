// expect: mask_bool: the mask does not broadcast onto the scores.*bool_mask_broadcasts<loom::shape<loom::fix<3>, loom::fix<5> >, loom::shape<loom::fix<2>, loom::fix<4>, loom::fix<5> >, 0>
// max-bytes: 4000
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto s = input<"s", shape<fix<2>, fix<4>, fix<5>>>();
  auto m = input<"m", shape<fix<3>, fix<5>>, bool>();
  return mask_bool(s, m);
}
