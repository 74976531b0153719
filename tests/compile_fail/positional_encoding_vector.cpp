// expect: add_positional_encoding: x must be \[.., T, D\]
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto x = input<"x", shape<fix<8>>>();
  return add_positional_encoding(x);  // one step's vector [D]: the steps' axis T is missing
}
