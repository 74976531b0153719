// expect: rope: positions must be \[L\.\., T\]
// max-bytes: 4096
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto q = input<"q", shape<dyn<"B">, fix<4>, dyn<"T">, fix<8>>>();
  auto pos = input<"pos", shape<dyn<"B">, fix<4>>, int>();  // the heads instead of T
  return rope<rope_layout::interleaved>(q, pos);
}
