// mul kernels: y = a ⊙ b, b's shape a suffix of a's (broadcast over a's leading axes).
//   forward:  y[r, j] = a[r, j] · b[j]   (r: the leading axes flattened, j: b's elements)
//   backward: da[r, j] += dy[r, j] · b[j];  db[j] += Σ_r dy[r, j] · a[r, j]  (columns in
//             parallel chunks, rows in order inside each: the same sum for any thread count)
#include <algorithm>

#include "kernel.hpp"
#include "loom/ops/mul.hpp"
#include "parallel.hpp"
#include "reduce.hpp"

namespace loom::ops {

template <class T>
void mul_kernel<T>::forward(const op_args<T>& a) {
  const std::int64_t n = a.out_dims.size();
  const std::int64_t m = a.in_dims[1].size();
  if (m == 0) return;
  const T* x = a.input(0);
  const T* b = a.input(1);
  T* y = a.out;
  for_chunks(n / m, grain_for(m), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t j = 0; j < m; ++j) y[r * m + j] = x[r * m + j] * b[j];
  });
}

template <class T>
void mul_kernel<T>::backward(const op_args<T>& a) {
  const std::int64_t n = a.out_dims.size();
  const std::int64_t m = a.in_dims[1].size();
  if (m == 0) return;
  const std::int64_t rows = n / m;
  const T* x = a.input(0);
  const T* b = a.input(1);
  const T* dy = a.dout;
  // mul(x, x) passes the same gradient buffer twice: the two loops below run one after the
  // other, so each adds its share without racing the other.
  if (T* dx = a.grad(0)) {
    for_chunks(rows, grain_for(m), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t j = 0; j < m; ++j) dx[r * m + j] += dy[r * m + j] * b[j];
    });
  }
  if (T* db = a.grad(1))  // db += Σ_rows dy ⊙ x
    sum_over_rows(rows, m, column_sum{db, false, [&](std::int64_t r, std::int64_t j) { return dy[r * m + j] * x[r * m + j]; }});
}

template struct mul_kernel<float>;
template struct mul_kernel<double>;

}  // namespace loom::ops
