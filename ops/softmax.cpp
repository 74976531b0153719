// softmax kernels, over the last axis.
//   forward:  y = exp(x − max) / Σ exp(x − max); a row whose max is −∞ (fully masked) is 0.
//   backward: dx += y ⊙ (dy − Σ_j dy_j y_j)
#include <cmath>
#include <limits>

#include "kernels.hpp"
#include "parallel.hpp"
#include "vmath.hpp"

namespace loom::ops {

template <class T>
void softmax_kernel<T>::forward(const op_args<T>& a) {
  const std::int64_t n = a.out_dims[-1];
  const std::int64_t rows = n ? a.out_dims.size() / n : 0;
  const T* x = a.input(0);
  T* y = a.out;
  for_chunks(rows, grain_for(8 * n), [&](std::int64_t r0, std::int64_t r1) {
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
  });
}

template <class T>
void softmax_kernel<T>::backward(const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const std::int64_t n = a.out_dims[-1];
  const std::int64_t rows = n ? a.out_dims.size() / n : 0;
  const T* y = a.out;
  const T* dy = a.dout;
  with_fresh(a.fresh(0), [&](auto fresh) {
    for_chunks(rows, grain_for(4 * n), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const T* yr = y + r * n;
        const T* dyr = dy + r * n;
        T* dxr = dx + r * n;
        const T dot = lane_dot(dyr, yr, n);
        for (std::int64_t j = 0; j < n; ++j) put<fresh()>(dxr[j], yr[j] * (dyr[j] - dot));
      }
    });
  });
}

template struct softmax_kernel<float>;
template struct softmax_kernel<double>;

}  // namespace loom::ops
