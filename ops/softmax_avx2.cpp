// softmax's row loops for float, compiled with -mavx2 -mfma (see CMakeLists.txt); called by
// softmax.cpp only when the CPU reports AVX2 and FMA.
#include "softmax_rows.hpp"

namespace loom::ops {

void softmax_forward_rows_avx2(const float* x, float* y, std::int64_t r0, std::int64_t r1, std::int64_t n) {
  softmax_rows::forward(x, y, r0, r1, n);
}

void softmax_backward_rows_avx2(const float* y, const float* dy, float* dx, std::int64_t r0, std::int64_t r1,
                                std::int64_t n, bool fresh) {
  softmax_rows::backward(y, dy, dx, r0, r1, n, fresh);
}

}  // namespace loom::ops
