// Loop building blocks that the compiler can vectorise: exp without a library call, and
// sums in eight fixed lanes (the order of additions depends only on the length, so results
// stay bit-identical for any thread count).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace loom::ops {
// Internal linkage (an unnamed namespace): a file compiled for AVX2 includes this header too,
// and its copies must never stand in for the baseline ones at link time.
namespace {

/// e^x. In float: range reduction x = n·ln2 + r, |r| ≤ ln2/2, then a degree-6 Taylor
/// polynomial for e^r (relative error < 2.5e-7) scaled by 2^n through the exponent bits —
/// plain arithmetic with min/max and one select, so loops over it vectorise. e^x is 0 for
/// x < −87.3 (and for −∞) and saturates at e^88.3 ≈ 2.1e38 above (loom calls it on x − max ≤ 0).
/// In double: std::exp (gradient checks want every digit).
template <class T>
inline T vexp(T x) {
  if constexpr (std::is_same_v<T, double>) {
    return std::exp(x);
  } else {
    constexpr float log2e = 1.44269504088896341f;
    constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    constexpr float magic = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
    const float xc = std::min(std::max(x, -87.3f), 88.3f);
    const float kf = (xc * log2e + magic) - magic;
    const float r = (xc - kf * ln2_hi) - kf * ln2_lo;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const std::int32_t n = static_cast<std::int32_t>(kf);
    const float scale = std::bit_cast<float>(static_cast<std::int32_t>((n + 127) << 23));
    const float y = p * scale;
    return x < -87.3f ? 0.0f : y;
  }
}

/// Σ x[i] for i < n, accumulated in eight lanes then combined in a fixed order.
template <class T>
inline T lane_sum(const T* x, std::int64_t n) {
  T lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += x[i + k];
  T tail = 0;
  for (; i < n; ++i) tail += x[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) + tail;
}

/// Σ x[i]·y[i] for i < n, in eight lanes.
template <class T>
inline T lane_dot(const T* x, const T* y, std::int64_t n) {
  T lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += x[i + k] * y[i + k];
  T tail = 0;
  for (; i < n; ++i) tail += x[i] * y[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) + tail;
}

/// max x[i] for i < n (n ≥ 1), in eight lanes; −∞ stays −∞.
template <class T>
inline T lane_max(const T* x, std::int64_t n) {
  const T lowest = -std::numeric_limits<T>::infinity();
  T lane[8] = {lowest, lowest, lowest, lowest, lowest, lowest, lowest, lowest};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = x[i + k] > lane[k] ? x[i + k] : lane[k];
  T m = lowest;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int k = 0; k < 8; ++k) m = lane[k] > m ? lane[k] : m;
  return m;
}

}  // namespace
}  // namespace loom::ops
