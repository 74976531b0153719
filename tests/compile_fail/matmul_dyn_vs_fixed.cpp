// expect: inner_dims_match<loom::dyn<loom::fixed_string<2>\{"T"\}>, loom::fix<16> >.+evaluates to false
// max-bytes: 4096
// [B, T, T] scores times values [B, 16, D]: the key length is "T" on one side and 16 on the other.
#include "loom/loom.hpp"
using namespace loom;
auto bad() {
  auto w = input<"w", shape<dyn<"B">, dyn<"T">, dyn<"T">>>();
  auto v = input<"v", shape<dyn<"B">, fix<16>, fix<8>>>();
  return matmul(w, v);
}
