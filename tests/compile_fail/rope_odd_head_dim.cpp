// expect: rope: the head dim Dh \(x's last axis\) must be even
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto q = input<"q", shape<dyn<"B">, fix<4>, dyn<"T">, fix<7>>>();
  auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
  return rope<rope_layout::rotate_half>(q, pos);
}
