// scale kernels: y = c · x;  dx += c · dy.
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/scale.hpp"
#include "loom/core/parallel.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers

template <class T>
void forward_kernel(scale_def, const op_args<T>& a) {
  const T c = static_cast<T>(a.template attrs<scale_attrs>().factor);
  const T* x = a.input(0);
  T* y = a.out;
  for_chunks(a.out_dims.size(), 1 << 14, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) y[i] = c * x[i];
  });
}

template <class T>
void backward_kernel(scale_def, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T c = static_cast<T>(a.template attrs<scale_attrs>().factor);
  const T* dy = a.dout;
  with_fresh(a.fresh(0), [&](auto fresh) {
    for_chunks(a.out_dims.size(), 1 << 14, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) put<fresh()>(dx[i], c * dy[i]);
    });
  });
}

template struct compiled_kernels<scale_def>;

}  // namespace loom
