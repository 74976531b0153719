// The kernels of own_ops.hpp's ops, instantiated here for float and double.
#include "own_ops.hpp"

#include <cstdint>

#include "loom/core/compiled_kernels.hpp"
#include "loom/core/parallel.hpp"

namespace consumer {

template <class T>
void forward_kernel(cube_op, const loom::op_args<T>& a) {
  const T* x = a.input(0);
  loom::for_chunks(a.out_dims.size(), 1 << 14, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) a.out[i] = x[i] * x[i] * x[i];
  });
}

template <class T>
void backward_kernel(cube_op, const loom::op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T* x = a.input(0);
  loom::with_fresh(a.fresh(0), [&](auto fresh) {
    loom::for_chunks(a.out_dims.size(), 1 << 14, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) loom::put<fresh()>(dx[i], a.dout[i] * 3 * x[i] * x[i]);
    });
  });
}

}  // namespace consumer

template struct loom::compiled_kernels<consumer::cube_op>;
