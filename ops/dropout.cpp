// dropout kernels: x [..], seed [2] (int) -> y [..].
//   training: y[i] = x[i] · m[i] / (1 − P),  dx[i] += dy[i] · m[i] / (1 − P),
//             m[i] = [u(key, i) ≥ P], recomputed in backward from the same key.
//   otherwise: y = x, dx += dy.
//   u(key, i): splitmix64's output number i for the state `key` — a counter-based hash, so
//   each element's draw depends only on (key, i) — with its top 53 bits read as [0, 1).
//   key = mix(mix(seed[0] · 2³² + seed[1]) ^ the node's structural hash).

#include "dropout_mask.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/dropout.hpp"
#include "loom/core/parallel.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
using namespace dropout_detail;

constexpr std::int64_t elementwise_grain = 1 << 14;

template <class T>
void forward_kernel(dropout_def, const op_args<T>& a) {
  const std::int64_t n = a.out_dims.size();
  const T* x = a.input(0);
  T* y = a.out;
  const double p = a.template attrs<dropout_attrs>().p;
  if (!a.training || p == 0) {
    for_chunks(n, elementwise_grain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) y[i] = x[i];
    });
    return;
  }
  const dropout_mask mask(a.template input<std::int32_t>(1), a.node->hash, p);
  const T keep_scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  for_chunks(n, elementwise_grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) y[i] = mask.keep(i) ? x[i] * keep_scale : T(0);
  });
}

template <class T>
void backward_kernel(dropout_def, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const std::int64_t n = a.out_dims.size();
  const T* dy = a.dout;
  const double p = a.template attrs<dropout_attrs>().p;
  if (!a.training || p == 0) {
    for_chunks(n, elementwise_grain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) dx[i] += dy[i];
    });
    return;
  }
  const dropout_mask mask(a.template input<std::int32_t>(1), a.node->hash, p);
  const T keep_scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  for_chunks(n, elementwise_grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      if (mask.keep(i)) dx[i] += dy[i] * keep_scale;
  });
}

template struct compiled_kernels<dropout_def>;

}  // namespace loom
