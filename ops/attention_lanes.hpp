// Fused attention: the vector helpers of the kernels (GCC generic vectors, always inlined).
// Private to ops/attention.cpp, which alone includes it (one translation unit: the kernels
// stay out of every other file).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "attention_problem.hpp"
#include "gcc_vector.hpp"
#include "vector_isa.hpp"
#include "vmath.hpp"

namespace loom::ops {
namespace fused_attention {  // named, not anonymous: the kernels' lambdas capture these types

// ---------------------------------------------------------------- vectors
//
// GCC's generic vectors of `lanes` elements, which each version of a kernel (LOOM_VECTOR_CLONES)
// compiles to its own registers — one zmm for 16 floats on AVX-512, two ymm on AVX2 (a·b + c
// contracted to an FMA in both); the helpers are always inlined so that each version gets its
// own copy.

constexpr int lanes = 16;  // elements per vector (the small kernels choose their own: small_lanes)
/// L elements of T (the small kernels' blocks of L query rows); vec<T>: `lanes` of them.
template <class T, int L>
using lvec = gcc_vector<T, L * sizeof(T)>;
template <class T>
using vec = lvec<T, lanes>;

/// x in every lane (x − 0 is x exactly, −0 included; GCC broadcasts the scalar operand).
template <class V, class S>
[[gnu::always_inline]] inline V splat(S x) {
  return x - V{};
}
/// The L elements at p as a vector, and a vector stored at p (unaligned).
template <int L = lanes, class T>
[[gnu::always_inline]] inline lvec<T, L> load(const T* p) {
  lvec<T, L> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T, class V>
[[gnu::always_inline]] inline void store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

/// f of every lane (the double versions of the lane functions: libm, every digit).
template <class T, int L, class F>
[[gnu::always_inline]] inline lvec<T, L> per_lane(const lvec<T, L>& x, F f) {
  lvec<T, L> y;
  for (int i = 0; i < L; ++i) y[i] = f(x[i]);
  return y;
}

/// e^x in every lane: vmath's exp_clamped with the clamp at −88 instead of vexp's −87.3 and its
/// final select (x < −87.3 ? 0) left out — at −88 the result is exactly +0 already (also for
/// −∞). Same bits as vexp except for x in (−87.7, −87.3), where vexp gives 0 and this e^x
/// (below 1.2e−38). In double: std::exp per lane. (A select of GCC's generic vectors of this
/// width after a compare came out as scalar code per lane; the clamps' selects did not.)
template <class V>  // a GCC vector of floats of any width (exp_row_sum_halves: 8 lanes)
[[gnu::always_inline]] inline V vexp_float_lanes(V x) {
  const V lo = -88.0f - V{}, hi = 88.3f - V{};
  x = x < lo ? lo : x;
  x = hi < x ? hi : x;
  return exp_clamped(x);
}
template <class T, int L = lanes>
[[gnu::always_inline]] inline lvec<T, L> vexp_lanes(const lvec<T, L>& x) {
  if constexpr (std::is_same_v<T, double>) return per_lane<T, L>(x, [](double v) { return std::exp(v); });
  else return vexp_float_lanes(x);
}

/// The index vectors of __builtin_shuffle for vec<T>: integers of T's size.
template <class T>
struct lane_index {  // integers of T's width, one per lane
  using elem = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  using type = gcc_vector<elem, lanes * sizeof(elem)>;
};

/// ln x in every lane for x normal and positive (vmath's log_normal; the small forward's row sums
/// l ≥ 1, lanes with l = 0 give a finite value the caller discards): one vector instead of a libm
/// call per row (0.4% of the tiny training step [AMD EPYC]). In double: std::log per lane
/// (gradient checks want every digit).
template <class T, int L = lanes>
[[gnu::always_inline]] inline lvec<T, L> vlog_lanes(const lvec<T, L>& x) {
  if constexpr (std::is_same_v<T, double>) {
    return per_lane<T, L>(x, [](double v) { return std::log(v); });
  } else {
    return log_normal(x);
  }
}

/// The sum of v's lanes, in a fixed order: the upper half added to the lower, four times (lane
/// 0 ends with ((v0 + v8) + (v4 + v12)) + …). Shuffles in registers: the same sums through an
/// array were a store and reloads of its halves that waited for the store.
template <class T>
[[gnu::always_inline]] inline T lane_total(vec<T> v) {
  static_assert(lanes == 16, "the shuffles below are written for 16 lanes");
  using I = typename lane_index<T>::type;
  v += __builtin_shuffle(v, I{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
  v += __builtin_shuffle(v, I{4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3});
  v += __builtin_shuffle(v, I{2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1});
  v += __builtin_shuffle(v, I{1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0});
  return v[0];
}

/// row[j] = e^(row[j] − m) for j < ws (ws a multiple of `lanes`; vexp_lanes per element), and
/// the sum of the new values in `lanes` lanes (element j in lane j mod lanes) then lane_total.
/// exp_row_sum_wide works on vec<T>; exp_row_sum_halves (float) on 32-byte halves, adding lanes k
/// and k + 8 first as lane_total does: the same bits (a + b and b + a are the same float).
template <class T>
[[gnu::always_inline]] inline T exp_row_sum_wide(T* row, std::int64_t ws, T m) {
  const vec<T> base = splat<vec<T>>(m);
  vec<T> sum{};
  for (std::int64_t j = 0; j < ws; j += lanes) {
    const vec<T> e = vexp_lanes<T>(load(row + j) - base);
    store(row + j, e);
    sum += e;
  }
  return lane_total<T>(sum);
}

[[gnu::always_inline]] inline float exp_row_sum_halves(float* row, std::int64_t ws, float m) {
  static_assert(lanes == 16, "two halves of 8 floats");
  using H = gcc_vector<float, 32>;
  using I = gcc_vector<std::int32_t, 32>;
  const H base = m - H{};
  H s0{}, s1{};
  for (std::int64_t j = 0; j < ws; j += lanes) {
    H x0, x1;
    std::memcpy(&x0, row + j, sizeof x0);
    std::memcpy(&x1, row + j + 8, sizeof x1);
    const H e0 = vexp_float_lanes(x0 - base), e1 = vexp_float_lanes(x1 - base);
    std::memcpy(row + j, &e0, sizeof e0);
    std::memcpy(row + j + 8, &e1, sizeof e1);
    s0 += e0;
    s1 += e1;
  }
  H t = s0 + s1;  // lane_total's steps on lanes [0, 8)
  t += __builtin_shuffle(t, I{4, 5, 6, 7, 0, 1, 2, 3});
  t += __builtin_shuffle(t, I{2, 3, 0, 1, 2, 3, 0, 1});
  t += __builtin_shuffle(t, I{1, 0, 1, 0, 1, 0, 1, 0});
  return t[0];
}

/// exp_row_sum_wide, or its halves where the CPU lacks AVX-512 (wide_vectors, vector_isa.hpp:
/// without it the exponentials were 35% of an MHA forward on AMD EPYC family 25 model 1, Zen 3).
template <class T>
[[gnu::always_inline]] inline T exp_row_sum(T* row, std::int64_t ws, T m) {
  if constexpr (std::is_same_v<T, float>)
    if (!wide_vectors) return exp_row_sum_halves(row, ws, m);
  return exp_row_sum_wide(row, ws, m);
}

template <class T>
T* scratch(std::size_t elements) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < elements) buffer.resize(elements);
  return buffer.data();
}

}  // namespace fused_attention
}  // namespace loom::ops
