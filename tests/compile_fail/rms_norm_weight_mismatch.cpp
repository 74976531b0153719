// expect: rms_norm: w must be a vector \[D\] of x's last dim
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"T">, fix<8>>>();
  auto w = param<"norm.weight", shape<fix<4>>>();
  return rms_norm<1e-6>(x, w);
}
