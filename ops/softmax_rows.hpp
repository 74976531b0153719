// The row loops of softmax, compiled for the CPU's vector width (vector_isa.hpp).
#pragma once

#include <cstdint>
#include <limits>

#include "vector_isa.hpp"
#include "vmath.hpp"

namespace loom::ops::softmax_rows {

// y[r] = exp(x[r] − max) / Σ exp(x[r] − max) for rows [r0, r1) of length n; a row whose max
// is −∞ (fully masked) becomes 0.
template <class T>
LOOM_VECTOR_CLONES void forward(const T* x, T* y, std::int64_t r0, std::int64_t r1, std::int64_t n) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    const T mx = lane_max(xr, n);
    if (mx == -std::numeric_limits<T>::infinity()) {
      for (std::int64_t j = 0; j < n; ++j) yr[j] = T(0);
      continue;
    }
    for (std::int64_t j = 0; j < n; ++j) yr[j] = vexp(xr[j] - mx);
    const T inv = T(1) / lane_sum(yr, n);
    for (std::int64_t j = 0; j < n; ++j) yr[j] *= inv;
  }
}

// dx[r] (+)= y[r] ⊙ (dy[r] − ⟨dy[r], y[r]⟩) for rows [r0, r1); stores when fresh.
template <class T>
LOOM_VECTOR_CLONES void backward(const T* y, const T* dy, T* dx, std::int64_t r0, std::int64_t r1, std::int64_t n, bool fresh) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* yr = y + r * n;
    const T* dyr = dy + r * n;
    T* dxr = dx + r * n;
    const T dot = lane_dot(dyr, yr, n);
    if (fresh)
      for (std::int64_t j = 0; j < n; ++j) dxr[j] = yr[j] * (dyr[j] - dot);
    else
      for (std::int64_t j = 0; j < n; ++j) dxr[j] += yr[j] * (dyr[j] - dot);
  }
}

}  // namespace loom::ops::softmax_rows
