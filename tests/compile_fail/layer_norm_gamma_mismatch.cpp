// expect: layer_norm: gamma must be a vector \[D\] of x's last dim
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<dyn<"T">, fix<8>>>();
  auto gamma = param<"ln.weight", shape<fix<4>>>();
  auto beta = param<"ln.bias", shape<fix<8>>>();
  return layer_norm<1e-5>(x, gamma, beta);
}
