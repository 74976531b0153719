// loom's bf16 GEMM (see bgemm.hpp). On CPUs with AVX512_BF16, op(A) is rounded to bf16 once per
// call into 32-bit words, each the pair (k, k + 1) of one row (k even in the lower half): [M, K/2]
// words, or [K/2, M] when A is transposed. op(B) is rounded one panel of 32 columns at a time into
// [K/2, 32] words, each 32-bit lane of a vector the pair of one column. A tile of 8 rows × 32
// columns keeps its 16 sums in AVX-512 registers over the whole of K; each pair of k costs one
// vdpbf16ps per row and 16 columns, the row's word broadcast. Elsewhere a portable loop takes the
// same steps one multiply-add at a time.
//
// Measured on AMD EPYC (Zen 4, 3.65 GHz), 1 thread, November 2026 (bench/bench_gemm, hot caches):
// 1.6–2.0× as fast as loom's float kernel (sgemm_avx512) on the 12 products there with K ≥ 64
// (the models' layers and weight gradients, the attention's blocks, 1024³), 175–220 GFLOP/s: 48–60
// of the 64 flop a cycle that one vdpbf16ps a cycle gives. All but one are at 1.7× or more; the
// 64 × 64 × 512 weight gradient is at 1.6–1.7×: rounding its operands (256 KB of float read from
// L2 at ~16 bytes a cycle, not overlapped with the products) takes a fifth of its time. A 16³
// attention block, mostly packing, runs at the float kernel's speed.
#include "bgemm.hpp"
#include "cpu_features.hpp"
#include "packing_pool.hpp"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "loom/core/parallel.hpp"
#include "vector_isa.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LOOM_BGEMM_AVX512 1
// GCC 12's unpack and shuffle intrinsics pass an "undefined" vector as their unused merge
// source, which -Wmaybe-uninitialized reports once they are inlined (a false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace loom::ops {

namespace {

using i64 = std::int64_t;
using u32 = std::uint32_t;

// ---- the portable path ---------------------------------------------------------------------

// The operand the kernel multiplies for float x: to_bf16(x), but a zero of x's sign for a float
// denormal (vcvtne2ps2bf16 reads them so; a normal float never rounds to a bf16 denormal, so
// vdpbf16ps's own reading of bf16 denormals as zero has nothing left to do).
inline float operand(float x) {
  return (std::bit_cast<std::uint32_t>(x) & 0x7F80'0000u) == 0 ? std::copysign(0.f, x) : from_bf16(to_bf16(x));
}

// One step of a lane of vdpbf16ps: s + x · y with the exact product and one rounding to nearest
// even, then a nonzero result below 2^-126 after rounding to 24 bits with an unbounded exponent
// flushed to a zero of its sign. x and y are bf16 values (so never denormal), s a previous step's
// result or +0 (never denormal either). std::fma rounds on the denormal grid, which agrees with
// the unbounded exponent's rounding about being below 2^-126 except for an exact sum within 2^-150
// below 2^-126: fma gives 2^-126, vdpbf16ps flushes those under 2^-126 − 2^-151. The step redoes
// those with s and the smaller factor scaled by 2^24 (exact, and finite: the sum being that small,
// neither s nor the product can be near the top of the range).
inline float dp_step(float s, float x, float y) {
  const float r = std::fma(x, y, s);
  if (!(std::fabs(r) <= FLT_MIN) || r == 0.f) return r;  // normal, infinite, NaN or zero
  if (std::fabs(r) < FLT_MIN) return std::copysign(0.f, r);
  const float scaled = std::fabs(x) <= std::fabs(y) ? std::fma(x * 0x1p24f, y, s * 0x1p24f)
                                                    : std::fma(x, y * 0x1p24f, s * 0x1p24f);
  return std::fabs(scaled) < 0x1p-102f ? std::copysign(0.f, r) : r;
}

// c = alpha · s + beta · c as loom's float GEMM does it (c not read when beta is 0).
inline float finish(float s, float alpha, float beta, const float* c) {
  float x = alpha == 1.f ? s : alpha * s;
  if (beta != 0.f) x = std::fma(beta, *c, x);
  return x;
}

// One row of C over columns [0, n): row `ar` of Â and columns of B̂ given as rows of bt ([n, kp]),
// both as vdpbf16ps reads them and kp (even) long.
LOOM_VECTOR_CLONES void portable_row(const float* ar, const float* bt, i64 n, i64 kp, float alpha, float beta,
                                     float* c) {
  for (i64 j = 0; j < n; ++j) {
    const float* bj = bt + j * kp;
    float s = 0.f;
    for (i64 q = 0; q < kp; q += 2) {
      s = dp_step(s, ar[q + 1], bj[q + 1]);
      s = dp_step(s, ar[q], bj[q]);
    }
    c[j] = finish(s, alpha, beta, c + j);
  }
}


}  // namespace

void from_bf16(const std::uint16_t* h, float* out, std::int64_t n) {
  for (i64 i = 0; i < n; ++i) out[i] = from_bf16(h[i]);
}

void bgemm_portable(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                    const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                    std::int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const i64 kp = (k + 1) / 2 * 2;  // an odd K's last pair padded with +0
  std::vector<float> ar(static_cast<std::size_t>(kp)), bt(static_cast<std::size_t>(n * kp), 0.f);
  for (i64 j = 0; j < n; ++j)
    for (i64 q = 0; q < k; ++q) bt[j * kp + q] = operand(trans_b ? b[j * ldb + q] : b[q * ldb + j]);
  for (i64 i = 0; i < m; ++i) {
    std::fill(ar.begin(), ar.end(), 0.f);
    for (i64 q = 0; q < k; ++q) ar[q] = operand(trans_a ? a[q * lda + i] : a[i * lda + q]);
    portable_row(ar.data(), bt.data(), n, kp, alpha, beta, c + i * ldc);
  }
}

#if LOOM_BGEMM_AVX512
namespace {

// ---- AVX-512 ---------------------------------------------------------------------------------

// The first w lanes of a vector of 16 (none for w <= 0, all for w >= 16).
inline __mmask16 first_lanes(i64 w) { return static_cast<__mmask16>(w >= 16 ? 0xFFFFu : w <= 0 ? 0u : (1u << w) - 1); }

// to_bf16 of 16 floats, left in the upper halves of the 32-bit lanes (the lower halves are
// garbage): x + 0x7FFF + (bit 16 of x), or for NaNs x with the quiet bit set.
[[gnu::target("avx512f"), gnu::always_inline]] inline __m512i round_upper(__m512i x) {
  const __m512i rounded = _mm512_add_epi32(
      x, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1))));
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFF'FFFF)), _mm512_set1_epi32(0x7F80'0000));
  return _mm512_mask_or_epi32(rounded, nan, x, _mm512_set1_epi32(0x0040'0000));
}

[[gnu::target("avx512f")]] void to_bf16_avx512(const float* x, std::uint16_t* out, i64 n) {
  for (i64 i = 0; i < n; i += 16) {
    const __mmask16 keep = first_lanes(n - i);
    const __m512i r = round_upper(_mm512_castps_si512(_mm512_maskz_loadu_ps(keep, x + i)));
    _mm512_mask_cvtepi32_storeu_epi16(out + i, keep, _mm512_srli_epi32(r, 16));
  }
}

#define LOOM_BF16_TARGET gnu::target("avx512f,avx512bw,avx512bf16")

// 32 consecutive floats x[0, w) (zeros past w, w ≤ 32) as 32 bf16 in order, by vcvtne2ps2bf16:
// to_bf16's bits for every float but denormals, which it reads as zeros of their sign (checked
// against to_bf16 for all 2^32 floats on AMD Zen 4). As 16 words: the pairs along a row of k.
[[LOOM_BF16_TARGET, gnu::always_inline]] inline __m512i bf16_32(const float* x, i64 w) {
  const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(w), x), hi = _mm512_maskz_loadu_ps(first_lanes(w - 16), x + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// The bf16 pairs of rows k and k + 1 (`even` and `odd`, null past K) over 32 lanes across (w of
// them read, zeros past w): lanes [0, 16) in first, [16, 32) in second, each word
// bf16(even[l]) | bf16(odd[l]) << 16.
[[LOOM_BF16_TARGET, gnu::always_inline]] inline void pairs_across(const float* even, const float* odd, i64 w,
                                                                __m512i& first, __m512i& second) {
  const __m512i e = bf16_32(even, w), o = odd ? bf16_32(odd, w) : _mm512_setzero_si512();
  // 16-bit lanes of e and o interleaved: e0 o0 e1 o1 ... (o's lanes are 32 + l in the pair e:o)
  const __m512i low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5,
                                       36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
  first = _mm512_permutex2var_epi16(e, low, o);
  second = _mm512_permutex2var_epi16(e, high, o);
}

// op(A)'s rows [0, m) as pairs into `out`. Not transposed (a is [M, K]): out[i · pairs + q], each
// row's pairs contiguous. Transposed (a is [K, M]): out[q · m_pad + i], each pair's rows contiguous
// (m_pad a multiple of 32, zeros past m).
[[LOOM_BF16_TARGET]] void pack_a(bool trans_a, const float* a, i64 lda, i64 m, i64 k, i64 pairs, i64 m_pad, u32* out) {
  if (!trans_a) {
    for (i64 i = 0; i < m; ++i)
      for (i64 q = 0; q < pairs; q += 16)
        _mm512_mask_storeu_epi32(out + i * pairs + q, first_lanes(pairs - q), bf16_32(a + i * lda + 2 * q, k - 2 * q));
    return;
  }
  for (i64 q = 0; q < pairs; ++q) {
    const float* even = a + 2 * q * lda;
    const float* odd = 2 * q + 1 < k ? even + lda : nullptr;
    for (i64 i = 0; i < m; i += 32) {
      __m512i first, second;
      pairs_across(even + i, odd ? odd + i : nullptr, m - i, first, second);
      _mm512_storeu_si512(out + q * m_pad + i, first);
      _mm512_storeu_si512(out + q * m_pad + i + 16, second);
    }
  }
}

// The 16 × 16 words of r transposed in place: r[x] lane y becomes r[y] lane x.
[[LOOM_BF16_TARGET, gnu::always_inline]] inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {  // within each 128-bit lane, rows 2i and 2i + 1 interleaved
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // lane L of r[4g + e]: element 4L + e of rows 4g .. 4g + 3
    r[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int e = 0; e < 4; ++e) {  // element 4L + e of all 16 rows: lane L of r[e], r[4 + e], r[8 + e], r[12 + e]
    const __m512i x02 = _mm512_shuffle_i32x4(r[e], r[4 + e], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i y02 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i x13 = _mm512_shuffle_i32x4(r[e], r[4 + e], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i y13 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], _MM_SHUFFLE(3, 1, 3, 1));
    t[e] = _mm512_shuffle_i32x4(x02, y02, _MM_SHUFFLE(2, 0, 2, 0));
    t[8 + e] = _mm512_shuffle_i32x4(x02, y02, _MM_SHUFFLE(3, 1, 3, 1));
    t[4 + e] = _mm512_shuffle_i32x4(x13, y13, _MM_SHUFFLE(2, 0, 2, 0));
    t[12 + e] = _mm512_shuffle_i32x4(x13, y13, _MM_SHUFFLE(3, 1, 3, 1));
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// The panel of columns [j0, j0 + w) of op(B) as pairs: panel[q · width + jj], zero past w up to
// `width` (16 or 32). Not transposed (b is [K, N]): two rows of b make 16 columns' pairs.
// Transposed (b is [N, K]): each column's pairs lie along its row of b, 16 columns × 16 pairs
// transposed in registers.
[[LOOM_BF16_TARGET]] void pack_b(bool trans_b, const float* b, i64 ldb, i64 j0, i64 w, i64 k, i64 pairs, u32* panel,
                                 i64 width) {
  if (!trans_b) {
    for (i64 q = 0; q < pairs; ++q) {
      const float* even = b + 2 * q * ldb + j0;
      __m512i first, second;
      pairs_across(even, 2 * q + 1 < k ? even + ldb : nullptr, w, first, second);
      _mm512_store_si512(panel + q * width, first);
      if (width == 32) _mm512_store_si512(panel + q * width + 16, second);
    }
    return;
  }
  for (i64 jj = 0; jj < width; jj += 16)
    for (i64 q = 0; q < pairs; q += 16) {
      __m512i r[16];
      for (int x = 0; x < 16; ++x)
        r[x] = jj + x < w ? bf16_32(b + (j0 + jj + x) * ldb + 2 * q, k - 2 * q) : _mm512_setzero_si512();
      transpose16(r);
      const i64 rows = std::min<i64>(16, pairs - q);
      for (int y = 0; y < rows; ++y) _mm512_store_si512(panel + (q + y) * width + jj, r[y]);
    }
}

// c[lanes] = alpha · s + beta · c for the lanes of `keep` (c not read when beta is 0), then the
// epilogue for row r, columns j.. of a tile (e's pointers at the tile's first column and first
// element): + bias, max(0, y) (y itself when y is NaN or ±0, as std::max(y, 0.f)), + residual,
// in that order.
[[LOOM_BF16_TARGET, gnu::always_inline]] inline void put_lanes(float* c, __m512 s, float alpha, float beta,
                                                             __mmask16 keep, const gemm_epilogue& e, i64 r, i64 j) {
  __m512 x = alpha == 1.f ? s : _mm512_mul_ps(_mm512_set1_ps(alpha), s);
  if (beta != 0.f) x = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(keep, c), x);
  if (e.bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(keep, e.bias + j));
  if (e.relu) x = _mm512_max_ps(_mm512_setzero_ps(), x);
  if (e.residual) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(keep, e.residual + r * e.ldr + j));
  _mm512_mask_storeu_ps(c, keep, x);
}

// R rows × 16·NV columns of C from packed A (row r's pair q at a[r · a_row + q · a_q]) and a
// panel (pair q's columns at panel + q · width); `last` masks the columns of the last vector
// that C has.
template <int R, int NV>
[[LOOM_BF16_TARGET, gnu::always_inline]] inline void tile(const u32* a, i64 a_row, i64 a_q, const u32* panel,
                                                        i64 width, i64 pairs, float* c, i64 ldc, float alpha,
                                                        float beta, __mmask16 last, const gemm_epilogue& e) {
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (i64 q = 0; q < pairs; ++q) {
    const u32* bq = panel + q * width;
    __m512bh bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_load_si512(bq + 16 * v);
    const u32* aq = a + q * a_q;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(aq[r * a_row]));
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      put_lanes(c + r * ldc + 16 * v, acc[r][v], alpha, beta, v == NV - 1 ? last : __mmask16(0xFFFF), e, r, 16 * v);
}

template <int NV>
[[LOOM_BF16_TARGET]] void tile_rows(int rows, const u32* a, i64 a_row, i64 a_q, const u32* panel, i64 width,
                                    i64 pairs, float* c, i64 ldc, float alpha, float beta, __mmask16 last,
                                    const gemm_epilogue& e) {
  switch (rows) {
    case 8: return tile<8, NV>(a, a_row, a_q, panel, width, pairs, c, ldc, alpha, beta, last, e);
    case 7: return tile<7, NV>(a, a_row, a_q, panel, width, pairs, c, ldc, alpha, beta, last, e);
    case 6: return tile<6, NV>(a, a_row, a_q, panel, width, pairs, c, ldc, alpha, beta, last, e);
    case 5: return tile<5, NV>(a, a_row, a_q, panel, width, pairs, c, ldc, alpha, beta, last, e);
    case 4: return tile<4, NV>(a, a_row, a_q, panel, width, pairs, c, ldc, alpha, beta, last, e);
    case 3: return tile<3, NV>(a, a_row, a_q, panel, width, pairs, c, ldc, alpha, beta, last, e);
    case 2: return tile<2, NV>(a, a_row, a_q, panel, width, pairs, c, ldc, alpha, beta, last, e);
    default: return tile<1, NV>(a, a_row, a_q, panel, width, pairs, c, ldc, alpha, beta, last, e);
  }
}

// Words of op(A) packed (pack_a): [M, pairs], or [pairs, m_pad] transposed.
i64 packed_a_words(bool trans_a, i64 m, i64 pairs) { return trans_a ? pairs * ((m + 31) / 32 * 32) : m * pairs; }

// Words of op(B) packed whole: its panels of 32 columns one after the other, panel p at
// p · 32 · pairs (the last one `width` wide, 16 or 32, as pack_b makes it).
i64 packed_b_words(i64 n, i64 pairs) { return (n + 31) / 32 * 32 * pairs; }

constexpr i64 panel_cols = 32, tile_rows_max = 8;

// C = alpha · Â · B̂ + beta · C, then the epilogue, from packed A (pack_a's layout) and the
// panels of B̂, which panel_of(j0, w, width) gives for columns [j0, j0 + w) (packed then, or before).
template <class PanelOf>
[[LOOM_BF16_TARGET]] void products(bool trans_a, const u32* ap, i64 m, i64 n, i64 pairs, PanelOf&& panel_of,
                                   float alpha, float beta, float* c, i64 ldc, const gemm_epilogue& epilogue = {}) {
  const i64 a_row = trans_a ? 1 : pairs, a_q = trans_a ? (m + 31) / 32 * 32 : 1;
  for (i64 j0 = 0; j0 < n; j0 += panel_cols) {
    const i64 w = std::min(panel_cols, n - j0), width = (w + 15) / 16 * 16;
    const __mmask16 last = first_lanes((w - 1) % 16 + 1);
    const u32* panel = panel_of(j0, w, width);
    for (i64 i0 = 0; i0 < m; i0 += tile_rows_max) {
      const int rows = static_cast<int>(std::min(tile_rows_max, m - i0));
      const gemm_epilogue e = epilogue.at(i0, j0);
      if (width == 32)
        tile_rows<2>(rows, ap + i0 * a_row, a_row, a_q, panel, width, pairs, c + i0 * ldc + j0, ldc, alpha, beta, last, e);
      else
        tile_rows<1>(rows, ap + i0 * a_row, a_row, a_q, panel, width, pairs, c + i0 * ldc + j0, ldc, alpha, beta, last, e);
    }
  }
}

// The packing and the products use buffers kept by the thread: nothing else runs on it until
// the product is done.
[[LOOM_BF16_TARGET]] void bgemm_avx512(bool trans_a, bool trans_b, i64 m, i64 n, i64 k, float alpha, const float* a,
                                       i64 lda, const float* b, i64 ldb, float beta, float* c, i64 ldc) {
  const i64 pairs = (k + 1) / 2;
  thread_local std::vector<u32> a_buffer, b_buffer;
  u32* const ap = line_aligned(a_buffer, packed_a_words(trans_a, m, pairs));
  u32* const panel = line_aligned(b_buffer, pairs * panel_cols);
  pack_a(trans_a, a, lda, m, k, pairs, (m + 31) / 32 * 32, ap);
  products(trans_a, ap, m, n, pairs, [&](i64 j0, i64 w, i64 width) {
    pack_b(trans_b, b, ldb, j0, w, k, pairs, panel, width);
    return static_cast<const u32*>(panel);
  }, alpha, beta, c, ldc);
}

[[LOOM_BF16_TARGET]] void products_packed_b(bool trans_a, i64 m, float alpha, const float* a, i64 lda, const u32* bp,
                                            i64 n, i64 k, float beta, float* c, i64 ldc, const gemm_epilogue& e) {
  const i64 pairs = (k + 1) / 2;
  thread_local std::vector<u32> a_buffer;
  u32* const ap = line_aligned(a_buffer, packed_a_words(trans_a, m, pairs));
  pack_a(trans_a, a, lda, m, k, pairs, (m + 31) / 32 * 32, ap);
  products(trans_a, ap, m, n, pairs, [&](i64 j0, i64, i64) { return bp + j0 * pairs; }, alpha, beta, c, ldc, e);
}

[[LOOM_BF16_TARGET]] void products_packed_a(bool trans_a, const u32* ap, i64 m, i64 k, bool trans_b, i64 n,
                                            float alpha, const float* b, i64 ldb, float beta, float* c, i64 ldc) {
  const i64 pairs = (k + 1) / 2;
  thread_local std::vector<u32> b_buffer;
  u32* const panel = line_aligned(b_buffer, pairs * panel_cols);
  products(trans_a, ap, m, n, pairs, [&](i64 j0, i64 w, i64 width) {
    pack_b(trans_b, b, ldb, j0, w, k, pairs, panel, width);
    return static_cast<const u32*>(panel);
  }, alpha, beta, c, ldc);
}

// Packing once for several products, in parallel: the panels (B), or blocks of rows or of pairs
// of k (A), of about 2^16 floats each. Each word is written by one task and depends only on
// the operand: the same words for any split.
constexpr i64 pack_grain_floats = i64{1} << 16;

void pack_b_whole(bool trans_b, const float* b, i64 ldb, i64 n, i64 k, u32* out) {
  const i64 pairs = (k + 1) / 2;
  for_chunks((n + panel_cols - 1) / panel_cols, grain_for(panel_cols * k, pack_grain_floats), [&](i64 p0, i64 p1) {
    for (i64 p = p0; p < p1; ++p) {
      const i64 j0 = p * panel_cols, w = std::min(panel_cols, n - j0);
      pack_b(trans_b, b, ldb, j0, w, k, pairs, out + j0 * pairs, (w + 15) / 16 * 16);
    }
  });
}

void pack_a_whole(bool trans_a, const float* a, i64 lda, i64 m, i64 k, u32* out) {
  const i64 pairs = (k + 1) / 2, m_pad = (m + 31) / 32 * 32;
  if (!trans_a) {  // rows [i0, i1): words [i0 · pairs, i1 · pairs)
    for_chunks(m, grain_for(k, pack_grain_floats), [&](i64 i0, i64 i1) {
      pack_a(false, a + i0 * lda, lda, i1 - i0, k, pairs, m_pad, out + i0 * pairs);
    });
    return;
  }
  // pairs [q0, q1): rows 2·q0 on of a, words [q0 · m_pad, q1 · m_pad); the last block's odd k
  for_chunks(pairs, grain_for(2 * m, pack_grain_floats), [&](i64 q0, i64 q1) {
    pack_a(true, a + 2 * q0 * lda, lda, m, std::min(k, 2 * q1) - 2 * q0, q1 - q0, m_pad, out + q0 * m_pad);
  });
}

}  // namespace

void to_bf16(const float* x, std::uint16_t* out, std::int64_t n) {
  if (cpu().avx512f) return to_bf16_avx512(x, out, n);
  for (i64 i = 0; i < n; ++i) out[i] = to_bf16(x[i]);
}

bool bgemm_takes(bool, bool, std::int64_t m, std::int64_t n, std::int64_t k) {
  return cpu().avx512_bf16 && m >= 1 && n >= 1 && k >= 1;
}

void bgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (bgemm_takes(trans_a, trans_b, m, n, k)) bgemm_avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else bgemm_portable(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#else

void to_bf16(const float* x, std::uint16_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = to_bf16(x[i]);
}

bool bgemm_takes(bool, bool, std::int64_t, std::int64_t, std::int64_t) { return false; }

void bgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  bgemm_portable(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#endif

// ---- packed operands (the kernel's packing where the CPU has AVX512_BF16; elsewhere, and for
// shapes the kernel does not take, nothing is packed and the products read the operand) ----

template <bgemm_side S>
bgemm_packed<S>::bgemm_packed(bool trans, std::int64_t count, std::int64_t k, const float* x, std::int64_t ld)
    : trans_(trans), count_(count), k_(k), x_(x), ld_(ld) {
#if LOOM_BGEMM_AVX512
  if (S == bgemm_side::a ? !bgemm_takes(trans, false, count, 1, k) : !bgemm_takes(false, trans, 1, count, k)) return;
  const i64 pairs = (k + 1) / 2;
  storage_ = take_packing_buffer<u32>();
  u32* const words =
      line_aligned(storage_, S == bgemm_side::a ? packed_a_words(trans, count, pairs) : packed_b_words(count, pairs));
  if constexpr (S == bgemm_side::a) pack_a_whole(trans, x, ld, count, k, words);
  else pack_b_whole(trans, x, ld, count, k, words);
  words_ = words;
#endif
}

template <bgemm_side S>
bgemm_packed<S>::~bgemm_packed() {
  give_packing_buffer(std::move(storage_));
}

template class bgemm_packed<bgemm_side::a>;
template class bgemm_packed<bgemm_side::b>;

void bgemm(bool trans_a, std::int64_t m, float alpha, const float* a, std::int64_t lda, const bgemm_packed_b& b,
           float beta, float* c, std::int64_t ldc, const gemm_epilogue& e) {
#if LOOM_BGEMM_AVX512
  if (b.words_ && m >= 1)
    return products_packed_b(trans_a, m, alpha, a, lda, b.words_, b.count_, b.k_, beta, c, ldc, e);
#endif
  bgemm(trans_a, b.trans_, m, b.count_, b.k_, alpha, a, lda, b.x_, b.ld_, beta, c, ldc);
  // the epilogue as the kernel's tiles apply it: the same operations in the same order
  for (i64 i = 0; i < m; ++i)
    for (i64 j = 0; j < b.count_; ++j) {
      float y = c[i * ldc + j];
      if (e.bias) y = y + e.bias[j];
      if (e.relu) y = std::max(y, 0.f);
      if (e.residual) y = y + e.residual[i * e.ldr + j];
      c[i * ldc + j] = y;
    }
}

void bgemm(const bgemm_packed_a& a, bool trans_b, std::int64_t n, float alpha, const float* b, std::int64_t ldb,
           float beta, float* c, std::int64_t ldc) {
#if LOOM_BGEMM_AVX512
  if (a.words_ && n >= 1)
    return products_packed_a(a.trans_, a.words_, a.count_, a.k_, trans_b, n, alpha, b, ldb, beta, c, ldc);
#endif
  bgemm(a.trans_, trans_b, a.count_, n, a.k_, alpha, a.x_, a.ld_, b, ldb, beta, c, ldc);
}

}  // namespace loom::ops
