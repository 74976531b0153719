// expect: mask_padding: valid_len must be an int input
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto s = input<"s", shape<dyn<"B">, dyn<"T">, dyn<"T">>>();
  auto len = input<"len", shape<dyn<"B">>>();  // real, not int
  return mask_padding(s, len);
}
