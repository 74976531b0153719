// loom's one-row float product (decoding's GEMV) with AVX-512: see sgemv_avx512 in
// sgemm_avx512.hpp.
#include <algorithm>
#include <cstdint>

#include "sgemm_avx512.hpp"
#include "sgemm_lanes.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define LOOM_SGEMV_AVX512 1
// GCC 12's lane-extract intrinsics pass an "undefined" vector as their unused merge source,
// which -Wmaybe-uninitialized reports once they are inlined (a false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace loom::ops {

#if LOOM_SGEMV_AVX512
namespace {

using i64 = std::int64_t;
using avx512_lanes::first_lanes;
using avx512_lanes::last_lanes;
using avx512_lanes::put_lanes;

// The 16 lanes of each of a[0..3] added up, in lanes 0..3: the tree of GCC's
// _mm512_reduce_add_ps (halves of 256, then of 128 bits, then lanes 0 + 2 and 1 + 3, then those
// two), for four vectors at once and without a trip through memory. Reading four scalars
// stored one by one back as a vector stalls the load until the stores retire (no store
// forwarding): ~14% of a decoding step's GEMV time [AMD EPYC].
[[gnu::target("avx512f"), gnu::always_inline]] inline __m128 add_lanes4(const __m512 (&a)[4]) {
  __m128 q[4];
  for (int r = 0; r < 4; ++r) {
    const __m256 h = _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[r]), 1)),
                                   _mm512_castps512_ps256(a[r]));  // AVX-512F only
    q[r] = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
  }
  // [x0 + x2, x1 + x3] of rows 0 and 1, then of rows 2 and 3
  const __m128 p01 = _mm_add_ps(_mm_shuffle_ps(q[0], q[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm_shuffle_ps(q[0], q[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m128 p23 = _mm_add_ps(_mm_shuffle_ps(q[2], q[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm_shuffle_ps(q[2], q[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm_add_ps(_mm_shuffle_ps(p01, p23, _MM_SHUFFLE(2, 0, 2, 0)), _mm_shuffle_ps(p01, p23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// s += row[at, at + 16) ⊙ x[at, at + 16), the lanes past k masked off.
[[gnu::target("avx512f"), gnu::always_inline]] inline __m512 block_fma(const float* row, const float* x, i64 at, i64 k,
                                                                     __m512 s) {
  const __mmask16 keep = first_lanes(k - at);
  return _mm512_fmadd_ps(_mm512_maskz_loadu_ps(keep, row + at), _mm512_maskz_loadu_ps(keep, x + at), s);
}

// One row's x · row in 16 lanes: its 16-float block q into partial sum q mod 4, in order, the
// partial sums then added as (s0 + s1) + (s2 + s3).
[[gnu::target("avx512f"), gnu::always_inline]] inline __m512 row_lanes(const float* row, const float* x, i64 k) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  i64 kk = 0;
  for (; kk + 64 <= k; kk += 64) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(row + kk), _mm512_loadu_ps(x + kk), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(row + kk + 16), _mm512_loadu_ps(x + kk + 16), s1);
    s2 = _mm512_fmadd_ps(_mm512_loadu_ps(row + kk + 32), _mm512_loadu_ps(x + kk + 32), s2);
    s3 = _mm512_fmadd_ps(_mm512_loadu_ps(row + kk + 48), _mm512_loadu_ps(x + kk + 48), s3);
  }
  if (kk < k) s0 = block_fma(row, x, kk, k, s0);  // the last 1 to 63 of k
  if (kk + 16 < k) s1 = block_fma(row, x, kk + 16, k, s1);
  if (kk + 32 < k) s2 = block_fma(row, x, kk + 32, k, s2);
  if (kk + 48 < k) s3 = block_fma(row, x, kk + 48, k, s3);
  return _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
}

// Rows j.. of dot_rows' c, `rows` of them (1 to 4; a short group repeats its last row of b),
// each summed in 16 lanes, whose lanes add_lanes4 then adds up. RowWise (k >= 64): one row after
// the other (row_lanes), so that b is read as one stream. Else the four rows side by side, each
// over k in order: for short rows (the attention's 32 floats) the four sums share one pass.
// Four rows side by side are four streams 4·ldb bytes apart, which the prefetchers serve worse:
// the decoding step's nine weight GEMVs (7.3 MB from the last-level cache) took 87 µs so, 81 µs
// row by row, against 74 µs for reading the bytes alone [AMD EPYC].
template <bool RowWise>
[[gnu::target("avx512f"), gnu::always_inline]] inline void dot_group(i64 j, int rows, i64 k, float alpha, const float* x,
                                                                   const float* b, i64 ldb, float beta, float* c) {
  const float* br[4];
  for (int r = 0; r < 4; ++r) br[r] = b + (j + std::min(r, rows - 1)) * ldb;
  __m512 t[4];
  if constexpr (RowWise) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) t[r] = row_lanes(br[r], x, k);
  } else {
    for (int r = 0; r < 4; ++r) t[r] = _mm512_setzero_ps();
    const i64 full = k / 16 * 16;
    for (i64 kk = 0; kk < full; kk += 16) {
      const __m512 xv = _mm512_loadu_ps(x + kk);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) t[r] = _mm512_fmadd_ps(_mm512_loadu_ps(br[r] + kk), xv, t[r]);
    }
    if (const __mmask16 tail = first_lanes(k - full)) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + full);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) t[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, br[r] + full), xv, t[r]);
    }
  }
  put_lanes(c + j, _mm512_zextps128_ps512(add_lanes4(t)), alpha, beta, first_lanes(rows));
}

template <bool RowWise>
[[gnu::target("avx512f")]] void dot_groups(i64 n, i64 k, float alpha, const float* x, const float* b, i64 ldb,
                                           float beta, float* c) {
  i64 j = 0;
  for (; j + 4 <= n; j += 4) dot_group<RowWise>(j, 4, k, alpha, x, b, ldb, beta, c);  // rows a constant
  if (j < n) dot_group<RowWise>(j, static_cast<int>(n - j), k, alpha, x, b, ldb, beta, c);
}

// c[j] = x · b[j] (rows of b [N, K], dot products), four rows at a time (dot_group); every row's
// sum depends on k and its own numbers only, so any split of the rows gives the same bits. Row
// by row x is read once per row: it is best 64-byte aligned (ops::gemm passes it so).
[[gnu::target("avx512f")]] void dot_rows(i64 n, i64 k, float alpha, const float* x, const float* b, i64 ldb,
                                         float beta, float* c) {
  if (k >= 64) dot_groups<true>(n, k, alpha, x, b, ldb, beta, c);
  else dot_groups<false>(n, k, alpha, x, b, ldb, beta, c);
}

// s[v] += x_k · row[16 v ..]: V vectors, the last masked by `last` when Tail.
template <int V, bool Tail>
[[gnu::target("avx512f"), gnu::always_inline]] inline void combine_step(__m512 (&s)[V], float xk, const float* row,
                                                                      __mmask16 last) {
  const __m512 xv = _mm512_set1_ps(xk);
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v)
    s[v] = _mm512_fmadd_ps(xv, Tail && v == V - 1 ? _mm512_maskz_loadu_ps(last, row + 16 * v) : _mm512_loadu_ps(row + 16 * v),
                           s[v]);
}

// Columns j.. of combine_rows' c: V vectors of 16, the last masked by `last` when Tail, each
// summed over k in order. The vectors of a group share one pass over k: a vector on its own is
// one chain of multiply-adds, each waiting ~4 cycles for the one before (decoding's attention,
// p · V with 32 columns, was two such passes).
template <int V, bool Tail>
[[gnu::target("avx512f"), gnu::always_inline]] inline void combine_group(i64 j, __mmask16 last, i64 k, float alpha,
                                                                       const float* x, const float* b, i64 ldb,
                                                                       float beta, float* c) {
  __m512 s[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) s[v] = _mm512_setzero_ps();
  for (i64 kk = 0; kk < k; ++kk) combine_step<V, Tail>(s, x[kk], b + kk * ldb + j, last);
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) put_lanes(c + j + 16 * v, s[v], alpha, beta, Tail && v == V - 1 ? last : __mmask16(0xFFFF));
}

// c[j] = Σ_k x[k] · b[k, j] (b [K, N]): 64 columns at a time, then the 1 to 63 left.
[[gnu::target("avx512f")]] void combine_rows(i64 n, i64 k, float alpha, const float* x, const float* b, i64 ldb,
                                             float beta, float* c) {
  i64 j = 0;
  for (; j + 64 <= n; j += 64) combine_group<4, false>(j, 0xFFFF, k, alpha, x, b, ldb, beta, c);
  const i64 left = n - j;
  const __mmask16 last = last_lanes(left);
  switch ((left + 15) / 16) {
    case 1: combine_group<1, true>(j, last, k, alpha, x, b, ldb, beta, c); break;
    case 2: combine_group<2, true>(j, last, k, alpha, x, b, ldb, beta, c); break;
    case 3: combine_group<3, true>(j, last, k, alpha, x, b, ldb, beta, c); break;
    case 4: combine_group<4, true>(j, last, k, alpha, x, b, ldb, beta, c); break;
    default: break;  // none left
  }
}

}  // namespace

bool sgemv_avx512(bool trans_b, std::int64_t n, std::int64_t k, float alpha, const float* x, const float* b,
                  std::int64_t ldb, float beta, float* c) {
  if (!cpu().avx512f || n < 1 || k < 1) return false;
  if (trans_b) dot_rows(n, k, alpha, x, b, ldb, beta, c);
  else combine_rows(n, k, alpha, x, b, ldb, beta, c);
  return true;
}

#else

bool sgemv_avx512(bool, std::int64_t, std::int64_t, float, const float*, const float*, std::int64_t, float, float*) {
  return false;
}

#endif

}  // namespace loom::ops
