// softmax kernels, over the last axis.
//   forward:  y = exp(x − max) / Σ exp(x − max); a row whose max is −∞ (fully masked) is 0.
//   backward: dx += y ⊙ (dy − Σ_j dy_j y_j)
// The row loops are in softmax_rows.hpp, compiled for the CPU's vector width.
#include <type_traits>

#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/softmax.hpp"
#include "loom/core/parallel.hpp"
#include "softmax_rows.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers

template <class T>
void forward_kernel(softmax_op, const op_args<T>& a) {
  const std::int64_t n = a.out_dims[-1];
  const std::int64_t rows = n ? a.out_dims.size() / n : 0;
  const T* x = a.input(0);
  T* y = a.out;
  for_chunks(rows, grain_for(8 * n), [&](std::int64_t r0, std::int64_t r1) {
    softmax_rows::forward(x, y, r0, r1, n);
  });
}

template <class T>
void backward_kernel(softmax_op, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const std::int64_t n = a.out_dims[-1];
  const std::int64_t rows = n ? a.out_dims.size() / n : 0;
  const T* y = a.out;
  const T* dy = a.dout;
  const bool fresh = a.fresh(0);
  for_chunks(rows, grain_for(4 * n), [&](std::int64_t r0, std::int64_t r1) {
    softmax_rows::backward(y, dy, dx, r0, r1, n, fresh);
  });
}

template struct compiled_kernels<softmax_op>;

}  // namespace loom
