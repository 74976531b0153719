// add and sum kernels.
//   add: y = a + b, the two broadcast onto y (broadcast.hpp);
//        da += dy and db += dy, each summed over the axes its operand broadcasts along.
//   sum: y = Σ x;  dx += dy.
#include <algorithm>

#include "broadcast.hpp"
#include "kernel.hpp"
#include "loom/ops/add.hpp"
#include "parallel.hpp"

namespace loom::ops {

template <class T>
void add_kernel<T>::forward(const op_args<T>& a) {
  const T* x = a.input(0);
  const T* b = a.input(1);
  T* y = a.out;
  const broadcast_layout l(a.out_dims, a.in_dims[0], a.in_dims[1]);
  l.for_runs([&](std::int64_t o, std::int64_t ia, std::int64_t ib, std::int64_t n, std::int64_t sa, std::int64_t sb) {
    T* yo = y + o;
    const T* xa = x + ia;
    const T* xb = b + ib;
    if (sa == 1 && sb == 1)  // the loops the compiler vectorises
      for (std::int64_t j = 0; j < n; ++j) yo[j] = xa[j] + xb[j];
    else if (sa == 1)
      for (std::int64_t j = 0; j < n; ++j) yo[j] = xa[j] + xb[0];
    else if (sb == 1)
      for (std::int64_t j = 0; j < n; ++j) yo[j] = xa[0] + xb[j];
    else
      for (std::int64_t j = 0; j < n; ++j) yo[j] = xa[0] + xb[0];
  });
}

template <class T>
void add_kernel<T>::backward(const op_args<T>& a) {
  const T* dy = a.dout;
  const broadcast_layout l(a.out_dims, a.in_dims[0], a.in_dims[1]);
  // add(x, x) passes one gradient buffer twice: the two sums run one after the other
  for (int i = 0; i < 2; ++i)
    if (T* d = a.grad(i)) l.reduce_into(i, d, a.fresh(i), [&](std::int64_t o, std::int64_t) { return dy[o]; });
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
