// mul kernels: y = a ⊙ b, the two broadcast onto y (broadcast.hpp).
//   forward:  y = a ⊙ b
//   backward: da += dy ⊙ b, db += dy ⊙ a, each summed over the axes its operand broadcasts
//             along (in row-major order: the same sums for any thread count)
#include <algorithm>

#include "broadcast.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/mul.hpp"
#include "loom/core/parallel.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers

template <class T>
void forward_kernel(mul_op, const op_args<T>& a) {
  const T* x = a.input(0);
  const T* b = a.input(1);
  T* y = a.out;
  broadcast_layout(a.out_dims, a.in_dims[0], a.in_dims[1]).elementwise(x, b, y, [](T u, T v) { return u * v; });
}

template <class T>
void backward_kernel(mul_op, const op_args<T>& a) {
  const T* x = a.input(0);
  const T* b = a.input(1);
  const T* dy = a.dout;
  const broadcast_layout l(a.out_dims, a.in_dims[0], a.in_dims[1]);
  // mul(x, x) passes the same gradient buffer twice: the two sums run one after the other, so
  // each adds its share without racing the other
  if (T* dx = a.grad(0)) l.reduce_into(0, dx, false, [&](std::int64_t o, std::int64_t ib) { return dy[o] * b[ib]; });
  if (T* db = a.grad(1)) l.reduce_into(1, db, false, [&](std::int64_t o, std::int64_t ia) { return dy[o] * x[ia]; });
}

template struct compiled_kernels<mul_op>;

}  // namespace loom
