// add and sum kernels.
//   add: y = a + b, the two broadcast onto y (broadcast.hpp);
//        da += dy and db += dy, each summed over the axes its operand broadcasts along.
//   sum: y = Σ x;  dx += dy.
#include <algorithm>

#include "broadcast.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/add.hpp"
#include "loom/core/parallel.hpp"
#include "pass_gradient.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers

template <class T>
void forward_kernel(add_op, const op_args<T>& a) {
  const T* x = a.input(0);
  const T* b = a.input(1);
  T* y = a.out;
  broadcast_layout(a.out_dims, a.in_dims[0], a.in_dims[1]).elementwise(x, b, y, [](T u, T v) { return u + v; });
}

template <class T>
void backward_kernel(add_op, const op_args<T>& a) {
  const T* dy = a.dout;
  const broadcast_layout l(a.out_dims, a.in_dims[0], a.in_dims[1]);
  // add(x, x) passes one gradient buffer twice: the two sums run one after the other
  for (int i = 0; i < 2; ++i) {
    T* d = a.grad(i);
    if (!d) continue;
    if (a.in_dims[static_cast<std::size_t>(i)] == a.out_dims) {  // not broadcast: dx = dy
      pass_gradient(dy, d, a.out_dims.size(), a.fresh(i));
    } else {
      l.reduce_into(i, d, a.fresh(i), [&](std::int64_t o, std::int64_t) { return dy[o]; });
    }
  }
}

template <class T>
void forward_kernel(sum_op, const op_args<T>& a) {
  const std::int64_t n = a.in_dims[0].size();
  const T* x = a.input(0);
  T total = 0;
  for (std::int64_t i = 0; i < n; ++i) total += x[i];
  a.out[0] = total;
}

template <class T>
void backward_kernel(sum_op, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T g = a.dout[0];
  const std::int64_t n = a.in_dims[0].size();
  for_chunks(n, 1 << 15, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) dx[i] += g;
  });
}

template struct compiled_kernels<add_op>;
template struct compiled_kernels<sum_op>;

}  // namespace loom
