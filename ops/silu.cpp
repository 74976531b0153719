// silu kernels, elementwise. See include/loom/ops/silu.hpp for the math.
//   forward:  y = x σ(x)
//   backward: dx (+)= dy σ(x) (1 + x (1 − σ(x)))
#include <cmath>

#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/silu.hpp"
#include "loom/core/parallel.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
namespace {
constexpr std::int64_t elementwise_grain = 1 << 14;

template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
}  // namespace

template <class T>
void forward_kernel(silu_op, const op_args<T>& a) {
  const T* x = a.input(0);
  T* y = a.out;
  for_chunks(a.out_dims.size(), elementwise_grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) y[i] = x[i] * sigmoid(x[i]);
  });
}

template <class T>
void backward_kernel(silu_op, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T* x = a.input(0);
  const T* dy = a.dout;
  with_fresh(a.fresh(0), [&](auto fresh) {
    for_chunks(a.out_dims.size(), elementwise_grain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const T s = sigmoid(x[i]);
        put<fresh()>(dx[i], dy[i] * s * (T(1) + x[i] * (T(1) - s)));
      }
    });
  });
}

template struct compiled_kernels<silu_op>;

}  // namespace loom
