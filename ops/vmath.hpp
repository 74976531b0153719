// Loop building blocks that the compiler can vectorise: exp and log without a library call, and
// sums in eight or sixteen fixed lanes (the order of additions depends only on the length, so results
// stay bit-identical for any thread count).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "gcc_vector.hpp"

namespace loom::ops {
// Internal linkage (an unnamed namespace): a file compiled for AVX2 includes this header too,
// and its copies must never stand in for the baseline ones at link time.
namespace {

/// e^xc for xc already clamped to [−88, 88.3], in float: a float or a GCC vector of floats (the
/// same operations in every lane, so the same bits). Range reduction xc = n·ln2 + r, |r| ≤ ln2/2,
/// then a degree-6 Taylor polynomial for e^r (relative error < 2.5e-7) scaled by 2^n through the
/// exponent bits; n = −127 (xc below −87.7) gives exponent bits 0, i.e. exactly +0. Always
/// inlined, so that every vector version of a kernel (vector_isa.hpp) gets its own copy.
template <class F>
[[gnu::always_inline]] inline F exp_clamped(F xc) {
  constexpr float log2e = 1.44269504088896341f;
  constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
  constexpr float magic = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  const F kf = (xc * log2e + magic) - magic;
  const F r = (xc - kf * ln2_hi) - kf * ln2_lo;
  F p = 1.0f / 720 - F{};  // (x − 0 is x: a scalar, or x in every lane)
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  if constexpr (std::is_same_v<F, float>) {
    const std::int32_t n = static_cast<std::int32_t>(kf);
    return p * std::bit_cast<float>(static_cast<std::int32_t>((n + 127) << 23));
  } else {
    using I = decltype(kf < kf);  // the integer vector of F's shape
    const I n = __builtin_convertvector(kf, I);
    return p * std::bit_cast<F>((n + 127) << 23);
  }
}

/// ln x for x positive and normal, in float: a float or a GCC vector of floats (the same
/// operations in every lane). x = 2^e · m with m in [√½, √2) — the exponent taken after adding
/// the bits of 1 − √½ to x's, so that no select is needed (GCC turns selects on wide vectors into
/// scalar code) — then ln m = 2 atanh(s), s = (m − 1)/(m + 1), |s| ≤ 0.172, as
/// 2s + s · z (2/3 + z (2/5 + z (2/7 + z · 2/9))), z = s² (the series' next term is below 4e−9
/// relative), plus e · ln 2 in a high part exact in float and a low part. Within 2 ulp of the
/// correctly rounded ln x (tests/ops/vmath.cpp). Zero, subnormals, infinities and NaN give
/// finite values of no meaning: callers pass x ≥ 1 or discard the lane.
template <class F>
[[gnu::always_inline]] inline F log_normal(F x) {
  constexpr std::int32_t one = 0x3f800000, sqrt_half = 0x3f3504f3;  // the bits of 1.0f and √½
  constexpr float ln2_hi = 0.693145751953125f, ln2_lo = 1.42860677e-06f;
  using I = decltype(x < x);  // std::int32_t's shape: bool for a float, an integer vector otherwise
  using B = std::conditional_t<std::is_same_v<F, float>, std::int32_t, I>;
  const B bits = std::bit_cast<B>(x) + (one - sqrt_half);
  const B e = (bits >> 23) - 127;
  const F m = std::bit_cast<F>(static_cast<B>((bits & 0x007fffff) + sqrt_half));
  const F f = m - 1.0f;  // exact
  const F sv = f / (f + 2.0f);
  const F z = sv * sv;
  const F r = z * (0.666666667f + z * (0.4f + z * (0.285714286f + z * 0.222222222f)));
  // 2s + s·r written as f − f²/2 + s (f²/2 + r) (2s = f − s·f): f, exact, leads, so that the
  // result keeps its relative accuracy near x = 1, where ln x is small
  const F hfsq = 0.5f * f * f;
  F ef;
  if constexpr (std::is_same_v<F, float>) ef = static_cast<float>(e);
  else ef = __builtin_convertvector(e, F);
  return ef * ln2_hi + (f - (hfsq - (sv * (hfsq + r) + ef * ln2_lo)));
}

/// e^x. In float: exp_clamped of x clamped to [−87.3, 88.3] — plain arithmetic with min/max and
/// one select, so loops over it vectorise; e^x is 0 for x < −87.3 (and for −∞) and saturates at
/// e^88.3 ≈ 2.1e38 above (loom calls it on x − max ≤ 0). In double: std::exp (gradient checks
/// want every digit).
template <class T>
inline T vexp(T x) {
  if constexpr (std::is_same_v<T, double>) {
    return std::exp(x);
  } else {
    const float y = exp_clamped(std::min(std::max(x, -87.3f), 88.3f));
    return x < -87.3f ? 0.0f : y;
  }
}

/// The lanes of a sum in L = 8 or 16 lanes combined in a fixed tree (16: lanes k and k + 8
/// first; then ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))), then a scalar tail added last:
/// the order of additions depends on the length only. The tree runs in vectors, pairs of lanes
/// added by shuffles: written on scalars, GCC stored the lanes and added them one by one from
/// memory — most of layer norm's backward with rows of 64 (design-notes has the measurement).
/// The same additions in the same order: the same bits.
template <int L, class T>
[[gnu::always_inline]] inline T fold_lanes(const T* lane, T tail) {
  static_assert(L == 8 || L == 16);
  using V8 = gcc_vector<T, 8 * sizeof(T)>;
  using V4 = gcc_vector<T, 4 * sizeof(T)>;
  using V2 = gcc_vector<T, 2 * sizeof(T)>;
  V8 l8;
  if constexpr (L == 16) {
    V8 lo, hi;
    std::memcpy(&lo, lane, sizeof lo);
    std::memcpy(&hi, lane + 8, sizeof hi);
    l8 = lo + hi;
  } else {
    std::memcpy(&l8, lane, sizeof l8);
  }
  const V4 p = __builtin_shufflevector(l8, l8, 0, 2, 4, 6) + __builtin_shufflevector(l8, l8, 1, 3, 5, 7);
  const V2 q = __builtin_shufflevector(p, p, 0, 2) + __builtin_shufflevector(p, p, 1, 3);
  return (q[0] + q[1]) + tail;
}

/// Σ x[i] for i < n, accumulated in L lanes (element i in lane i mod L, the elements past the
/// last whole group in a tail) then combined by fold_lanes. Sixteen lanes where rows are short
/// and the sum is on the critical path (layer norm: a row of 64 is four dependent adds per lane).
template <int L = 8, class T>
inline T lane_sum(const T* x, std::int64_t n) {
  T lane[L] = {};
  std::int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int k = 0; k < L; ++k) lane[k] += x[i + k];
  T tail = 0;
  for (; i < n; ++i) tail += x[i];
  return fold_lanes<L>(lane, tail);
}

/// Σ x[i]·y[i] for i < n, in eight lanes.
template <class T>
inline T lane_dot(const T* x, const T* y, std::int64_t n) {
  T lane[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += x[i + k] * y[i + k];
  T tail = 0;
  for (; i < n; ++i) tail += x[i] * y[i];
  return fold_lanes<8>(lane, tail);
}

/// max x[i] for i < n (n ≥ 1); −∞ stays −∞, NaN is skipped. Two GCC vectors of 32 bytes in
/// flight, whose select GCC turns into vmaxps/vmaxpd on AVX2 and AVX-512 (the same select
/// written per element, or on a 64-byte vector with AVX2, came out as scalar code: one vmaxss
/// per element). A maximum does not depend on the order: the same value as any loop.
template <class T>
inline T lane_max(const T* x, std::int64_t n) {
  using half = gcc_vector<T, 32>;
  constexpr std::int64_t w = 32 / sizeof(T);
  const T lowest = -std::numeric_limits<T>::infinity();
  half a = lowest - half{}, b = a;
  std::int64_t i = 0;
  for (; i + 2 * w <= n; i += 2 * w) {
    half u, v;
    std::memcpy(&u, x + i, sizeof u);
    std::memcpy(&v, x + i + w, sizeof v);
    a = u > a ? u : a;
    b = v > b ? v : b;
  }
  a = b > a ? b : a;
  T m = lowest;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int k = 0; k < w; ++k) m = a[k] > m ? a[k] : m;
  return m;
}

}  // namespace
}  // namespace loom::ops
