// expect: reshape: the new shape has a different number of elements
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"T">, fix<8>>>();
  return reshape<shape<dyn<"T">, fix<3>, fix<3>>>(x);
}
