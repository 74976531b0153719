// dropout kernels: x [..], seed [2] (int) -> y [..].
//   training: y[i] = x[i] · m[i] / (1 − P),  dx[i] += dy[i] · m[i] / (1 − P),
//             m[i] = [u(key, i) ≥ P], recomputed in backward from the same key.
//   otherwise: y = x, dx += dy.
//   u(key, i): splitmix64's output number i for the state `key` — a counter-based hash, so
//   each element's draw depends only on (key, i) — with its top 53 bits read as [0, 1).
//   key = mix(mix(seed[0] · 2³² + seed[1]) ^ the node's structural hash).
#include <cmath>

#include "kernel.hpp"
#include "loom/ops/dropout.hpp"
#include "parallel.hpp"

namespace loom::ops {
// (a named namespace, not an anonymous one: the kernels' lambdas capture dropout_mask, and the
// kernels are declared in a public header)
namespace dropout_detail {

constexpr std::int64_t elementwise_grain = 1 << 14;
constexpr std::uint64_t golden_gamma = 0x9e3779b97f4a7c15ull;

// splitmix64's output function (Steele, Lea, Flood 2014; the constants of Stafford's Mix13)
constexpr std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct dropout_mask {
  std::uint64_t key = 0;
  std::uint64_t threshold = 0;  // keep element i when its 53-bit draw is ≥ this (P · 2⁵³)

  template <class T>
  explicit dropout_mask(const op_args<T>& a) {
    const std::int32_t* seed = a.template input<std::int32_t>(1);
    const std::uint64_t words =
        (std::uint64_t{static_cast<std::uint32_t>(seed[0])} << 32) | static_cast<std::uint32_t>(seed[1]);
    key = mix(mix(words) ^ a.node->hash);
    threshold = static_cast<std::uint64_t>(std::ceil(a.template attrs<dropout_attrs>().p * 0x1.0p53));
  }
  bool keep(std::int64_t i) const {
    const std::uint64_t draw = mix(key + (static_cast<std::uint64_t>(i) + 1) * golden_gamma) >> 11;
    return draw >= threshold;
  }
};

}  // namespace dropout_detail
using namespace dropout_detail;

template <class T>
void dropout_kernel<T>::forward(const op_args<T>& a) {
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
  const dropout_mask mask(a);
  const T keep_scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  for_chunks(n, elementwise_grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) y[i] = mask.keep(i) ? x[i] * keep_scale : T(0);
  });
}

template <class T>
void dropout_kernel<T>::backward(const op_args<T>& a) {
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
  const dropout_mask mask(a);
  const T keep_scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  for_chunks(n, elementwise_grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i)
      if (mask.keep(i)) dx[i] += dy[i] * keep_scale;
  });
}

template struct dropout_kernel<float>;
template struct dropout_kernel<double>;

}  // namespace loom::ops
