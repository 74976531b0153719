// add and sum kernels.
//   add: y = a + b, b's shape a suffix of a's (broadcast over a's leading axes);
//        da += dy;  db += Σ over the leading axes of dy.
//   sum: y = Σ x;  dx += dy.
#include <algorithm>

#include "kernel.hpp"
#include "loom/ops/add.hpp"
#include "parallel.hpp"
#include "reduce.hpp"

namespace loom::ops {

template <class T>
void add_kernel<T>::forward(const op_args<T>& a) {
  const std::int64_t n = a.out_dims.size();
  const std::int64_t m = a.in_dims[1].size();
  const T* x = a.input(0);
  const T* b = a.input(1);
  T* y = a.out;
  if (m == 0) return;
  for_chunks(n / m, grain_for(m), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t j = 0; j < m; ++j) y[r * m + j] = x[r * m + j] + b[j];
  });
}

template <class T>
void add_kernel<T>::backward(const op_args<T>& a) {
  const std::int64_t n = a.out_dims.size();
  const std::int64_t m = a.in_dims[1].size();
  const T* dy = a.dout;
  if (m == 0) return;
  if (T* dx = a.grad(0)) {
    with_fresh(a.fresh(0), [&](auto fresh) {
      for_chunks(n, 1 << 15, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) put<fresh()>(dx[i], dy[i]);
      });
    });
  }
  if (T* db = a.grad(1))  // db = Σ_rows dy
    sum_over_rows(n / m, m, column_sum{db, a.fresh(1), [&](std::int64_t r, std::int64_t j) { return dy[r * m + j]; }});
}

template <class T>
void sum_kernel<T>::forward(const op_args<T>& a) {
  const std::int64_t n = a.in_dims[0].size();
  const T* x = a.input(0);
  T total = 0;
  for (std::int64_t i = 0; i < n; ++i) total += x[i];
  a.out[0] = total;
}

template <class T>
void sum_kernel<T>::backward(const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T g = a.dout[0];
  const std::int64_t n = a.in_dims[0].size();
  for_chunks(n, 1 << 15, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) dx[i] += g;
  });
}

template struct add_kernel<float>;
template struct add_kernel<double>;
template struct sum_kernel<float>;
template struct sum_kernel<double>;

}  // namespace loom::ops
