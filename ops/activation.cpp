// relu and gelu kernels, elementwise.
//   relu: y = max(x, 0);                     dx += dy · [y > 0]  (= [x > 0])
//   gelu: y = x Φ(x) = x/2 (1 + erf(x/√2));  dx += dy · (Φ(x) + x φ(x)),  φ(x) = e^(−x²/2)/√(2π)
#include <algorithm>
#include <cmath>

#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/activation.hpp"
#include "loom/core/parallel.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
namespace {

constexpr std::int64_t elementwise_grain = 1 << 14;
constexpr double inv_sqrt2 = 0.70710678118654752440;
constexpr double inv_sqrt_2pi = 0.39894228040143267794;

// Calls f(i) for every element, in parallel chunks.
template <class F>
void each(std::int64_t n, F f) {
  for_chunks(n, elementwise_grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) f(i);
  });
}

}  // namespace

template <class T>
void forward_kernel(relu_op, const op_args<T>& a) {
  const T* x = a.input(0);
  T* y = a.out;
  each(a.out_dims.size(), [&](std::int64_t i) { y[i] = std::max(x[i], T(0)); });
}

template <class T>
void backward_kernel(relu_op, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T* y = a.out;  // y > 0 exactly where x > 0: the input need not be kept for backward
  const T* dy = a.dout;
  with_fresh(a.fresh(0), [&](auto fresh) {
    each(a.out_dims.size(), [&](std::int64_t i) {
      const T g = dy[i];  // loaded unconditionally, so that the select vectorises
      put<fresh()>(dx[i], y[i] > T(0) ? g : T(0));
    });
  });
}

template <class T>
void forward_kernel(gelu_op, const op_args<T>& a) {
  const T* x = a.input(0);
  T* y = a.out;
  each(a.out_dims.size(), [&](std::int64_t i) { y[i] = x[i] * T(0.5) * (T(1) + std::erf(x[i] * T(inv_sqrt2))); });
}

template <class T>
void backward_kernel(gelu_op, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T* x = a.input(0);
  const T* dy = a.dout;
  each(a.out_dims.size(), [&](std::int64_t i) {
    const T cdf = T(0.5) * (T(1) + std::erf(x[i] * T(inv_sqrt2)));
    const T pdf = T(inv_sqrt_2pi) * std::exp(T(-0.5) * x[i] * x[i]);
    dx[i] += dy[i] * (cdf + x[i] * pdf);
  });
}

template struct compiled_kernels<relu_op>;
template struct compiled_kernels<gelu_op>;

}  // namespace loom
