// loom's single-precision GEMM in AVX2 + FMA (see sgemm_avx2.hpp): a tile of 3 rows × 32 columns
// keeps its 12 sums in registers over the whole of K, each panel row loaded once per k and each
// element of op(A) broadcast once per k; the columns past a ragged N are masked off when C, the
// bias and the residual are read and C is written.
#include "sgemm_avx2.hpp"

#include "cpu_features.hpp"
#include "packing_pool.hpp"

#include <algorithm>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LOOM_SGEMM_AVX2 1
// GCC 12's unpack and shuffle intrinsics pass an "undefined" vector as their unused merge
// source, which -Wmaybe-uninitialized reports once they are inlined (a false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace loom::ops::sgemm_avx2 {

#if LOOM_SGEMM_AVX2
namespace {

using i64 = std::int64_t;

// The lanes [0, n) of a vector of 8 (none for n ≤ 0, all for n ≥ 8), as maskload and maskstore
// take them.
[[gnu::target("avx2,fma"), gnu::always_inline]] inline __m256i first_lanes(i64 n) {
  const int count = static_cast<int>(std::clamp<i64>(n, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

[[gnu::target("avx2,fma"), gnu::always_inline]] inline __m256 load_lanes(const float* p, bool full, __m256i keep) {
  return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, keep);
}

// c[0, min(n, 8)) = alpha · sum + beta · c (c not read when beta is 0), then + bias[j], max(0, y),
// + residual[r · ldr + j], each when given: the operations of the AVX-512 kernel's put_lanes, in
// its order (max(0, y) keeps y when y is NaN or −0, as vmaxps does there). Full: n ≥ 8, known
// where the tile is called (plain loads and stores, no lane mask).
template <bool Full>
[[gnu::target("avx2,fma"), gnu::always_inline]] inline void put(float* c, __m256 sum, float alpha, float beta, i64 n,
                                                               const gemm_epilogue& e, i64 r, i64 j) {
  const __m256i keep = Full ? _mm256_set1_epi32(-1) : first_lanes(n);
  __m256 x = alpha == 1.f ? sum : _mm256_mul_ps(_mm256_set1_ps(alpha), sum);
  if (beta != 0.f) x = _mm256_fmadd_ps(_mm256_set1_ps(beta), load_lanes(c, Full, keep), x);
  if (e.bias) x = _mm256_add_ps(x, load_lanes(e.bias + j, Full, keep));
  if (e.relu) x = _mm256_max_ps(_mm256_setzero_ps(), x);
  if (e.residual) x = _mm256_add_ps(x, load_lanes(e.residual + r * e.ldr + j, Full, keep));
  if (Full) _mm256_storeu_ps(c, x);
  else _mm256_maskstore_ps(c, keep, x);
}

// Where a tile's sums start and end when K is taken in blocks (sums): from zero or from the
// partial sums of the blocks before, kept in `part` (row r at part + r · 32, exactly as the
// registers held them, so each element is still one chain of FMAs over k in order); into C
// (with alpha, beta and the epilogue) after the last block, or back into `part`.
struct sums {
  float* part;
  bool first, last;
};

// R rows × 8·NV columns of C, of which the first w exist, over k rows of the panel (8·NV
// readable floats per row, zero past w when packed).
template <int R, int NV>
[[gnu::target("avx2,fma"), gnu::always_inline]] inline void tile(const float* a, i64 a_row, i64 a_k, const float* b,
                                                               i64 ldb, i64 k, float* c, i64 ldc, float alpha,
                                                               float beta, i64 w, const gemm_epilogue& e, sums s) {
  // at the last block of K, the residual or C (beta ≠ 0) the stores will read, asked for now
  // (as the AVX-512 tile does)
  // (the lines of the row's w columns, one more when not aligned)
  if (s.last) e.prefetch_reads<R, NV / 2 + 1>(c, ldc, beta, [&] { return w - 1; });
  __m256 acc[R][NV];
#pragma GCC unroll 3
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = s.first ? _mm256_setzero_ps() : _mm256_loadu_ps(s.part + r * 32 + 8 * v);
  for (i64 kk = 0; kk < k; ++kk) {
    const float* br = b + kk * ldb;
    const float* ak = a + kk * a_k;
    __m256 av[R];
#pragma GCC unroll 3
    for (int r = 0; r < R; ++r) av[r] = _mm256_broadcast_ss(ak + r * a_row);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __m256 bv = _mm256_loadu_ps(br + 8 * v);
#pragma GCC unroll 3
      for (int r = 0; r < R; ++r) acc[r][v] = _mm256_fmadd_ps(av[r], bv, acc[r][v]);
    }
  }
  if (s.last && w >= 8 * NV) {
    // a whole tile (the common case): no lane masks and no test of the width per vector; with
    // nothing but alpha (attention's scores), no other test per vector either — put's
    // operations, with the tests out of the loop. With K = 32 (the scores of heads of 32) the
    // tests per vector were about a quarter of a tile's time.
    if (beta == 0.f && !e.bias && !e.relu && !e.residual) {
      const __m256 va = _mm256_set1_ps(alpha);
      const bool scaled = alpha != 1.f;
#pragma GCC unroll 3
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
          _mm256_storeu_ps(c + r * ldc + 8 * v, scaled ? _mm256_mul_ps(va, acc[r][v]) : acc[r][v]);
      return;
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) put<true>(c + r * ldc + 8 * v, acc[r][v], alpha, beta, 8, e, r, 8 * v);
    return;
  }
#pragma GCC unroll 3
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      if (!s.last) _mm256_storeu_ps(s.part + r * 32 + 8 * v, acc[r][v]);
      else if (8 * v < w) put<false>(c + r * ldc + 8 * v, acc[r][v], alpha, beta, w - 8 * v, e, r, 8 * v);
}

template <int NV>
[[gnu::target("avx2,fma")]] void tile_rows_of(int rows, const float* a, i64 a_row, i64 a_k, const float* b, i64 ldb,
                                              i64 k, float* c, i64 ldc, float alpha, float beta, i64 w,
                                              const gemm_epilogue& e, sums s) {
  switch (rows) {
    case 3: return tile<3, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, w, e, s);
    case 2: return tile<2, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, w, e, s);
    default: return tile<1, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, w, e, s);
  }
}

// The panel of columns [j0, j0 + w) of op(B) = b ([K, N]), zero-padded to `width`.
[[gnu::target("avx2,fma")]] inline void pack_rows(const float* b, i64 ldb, i64 j0, i64 w, i64 k, float* panel, i64 width) {
  for (i64 kk = 0; kk < k; ++kk) {
    const float* src = b + kk * ldb + j0;
    float* out = panel + kk * width;
    for (i64 v = 0; v < width; v += 8) {
      const i64 n = w - v;
      _mm256_storeu_ps(out + v, n >= 8 ? _mm256_loadu_ps(src + v) : _mm256_maskload_ps(src + v, first_lanes(n)));
    }
  }
}

// The panel of columns [j0, j0 + w) of op(B) = bᵀ (b is [N, K]), zero-padded to `width`:
// panel[kk · width + jj] = b[(j0 + jj) · ldb + kk]. Blocks of 8 × 8 are transposed in registers
// (unpacks, then shuffles, then 128-bit halves), the ragged edges one element at a time.
[[gnu::target("avx2,fma")]] void pack_transposed(const float* b, i64 ldb, i64 j0, i64 w, i64 k, float* panel,
                                                 i64 width) {
  i64 jb = 0;
  for (; jb + 8 <= w; jb += 8) {
    const float* src = b + (j0 + jb) * ldb;
    i64 kb = 0;
    for (; kb + 8 <= k; kb += 8) {
      __m256 r[8], t[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ldb + kb);
      for (int i = 0; i < 4; ++i) {  // per 128-bit half: pairs of rows interleaved
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
      for (int g = 0; g < 2; ++g) {  // rows 4g..4g+3 of columns q and q + 4 in r[4g + q]
        r[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        r[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        r[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        r[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
      }
      for (int q = 0; q < 4; ++q) {  // the halves of the two groups joined: columns q and q + 4
        _mm256_storeu_ps(panel + (kb + q) * width + jb, _mm256_permute2f128_ps(r[q], r[4 + q], 0x20));
        _mm256_storeu_ps(panel + (kb + q + 4) * width + jb, _mm256_permute2f128_ps(r[q], r[4 + q], 0x31));
      }
    }
    for (i64 jj = jb; jj < jb + 8; ++jj)
      for (i64 kk = kb; kk < k; ++kk) panel[kk * width + jj] = b[(j0 + jj) * ldb + kk];
  }
  for (i64 jj = jb; jj < w; ++jj)
    for (i64 kk = 0; kk < k; ++kk) panel[kk * width + jj] = b[(j0 + jj) * ldb + kk];
  if (width != w)
    for (i64 kk = 0; kk < k; ++kk) std::fill(panel + kk * width + w, panel + (kk + 1) * width, 0.f);
}

}  // namespace

bool available() { return cpu().avx2_fma; }

void pack_panel(bool trans_b, const float* b, std::int64_t ldb, std::int64_t j0, std::int64_t w, std::int64_t k,
                float* panel, std::int64_t width) {
  if (trans_b) pack_transposed(b, ldb, j0, w, k, panel, width);
  else pack_rows(b, ldb, j0, w, k, panel, width);
}

void pack_row_panels(const float* b, std::int64_t ldb, std::int64_t n, std::int64_t k, float* out, std::int64_t p0,
                     std::int64_t p1) {
  // row by row, each row of b read once in order into every panel (a panel at a time reads 128
  // bytes from each of K rows ldb floats apart: 1024³ on AMD EPYC Zen 3, perf, its packing 6.1%
  // of the samples that way, 4.6% this way)
  for (i64 kk = 0; kk < k; ++kk)
    for (i64 p = p0; p < p1; ++p) {
      const i64 j0 = p * 32, w = std::min<i64>(32, n - j0), width = (w + 15) / 16 * 16;
      pack_rows(b + kk * ldb, ldb, j0, w, 1, out + j0 * k + kk * width, width);
    }
}

namespace {

// panel_tiles with tile t's op(A) from a + t · a_tile: rows a_row apart inside it.
void tiles(i64 m, i64 w, i64 width, const float* a, i64 a_row, i64 a_k, i64 a_tile, const float* p, i64 ld, i64 k,
           float* c, i64 ldc, float alpha, float beta, const gemm_epilogue& e) {
  // K in blocks of k_block: a block of the panel (16 KiB) and the lines of op(A) it meets stay in
  // the first-level cache while every tile of rows passes over them. Unblocked, a long K read
  // both from the second level at every tile: a weight gradient [256, 1024]ᵀ · [1024, 256] ran
  // at 78 GFLOP/s against 108 for OpenBLAS's AVX2 kernel (AMD EPYC Zen 4, AVX2 forced).
  constexpr i64 k_block = 128;
  thread_local std::vector<float> part_buffer;  // the partial sums of every row of the panel
  float* const part = k > k_block ? line_aligned(part_buffer, m * 32) : nullptr;
  for (i64 k0 = 0; k0 < k; k0 += k_block) {
    const i64 kn = std::min(k_block, k - k0);
    const bool first = k0 == 0, last = k0 + kn == k;
    for (i64 i0 = 0; i0 < m; i0 += tile_rows) {
      const int rows = static_cast<int>(std::min(tile_rows, m - i0));
      const gemm_epilogue ei = e.at(i0, 0);
      const sums s{part ? part + i0 * 32 : nullptr, first, last};
      const float* ai = a + i0 / tile_rows * a_tile + k0 * a_k;
      if (width == 32)
        tile_rows_of<4>(rows, ai, a_row, a_k, p + k0 * ld, ld, kn, c + i0 * ldc, ldc, alpha, beta, w, ei, s);
      else tile_rows_of<2>(rows, ai, a_row, a_k, p + k0 * ld, ld, kn, c + i0 * ldc, ldc, alpha, beta, w, ei, s);
    }
  }
}

// op(A)'s rows [0, rows) into strips of tile_rows rows: strip t at out + t · tile_rows · k, its
// element (r, kk) at kk · tile_rows + r; the rows past `rows` in the last strip are zero. Whole
// strips of rows read in order (a_k 1) are interleaved in vectors.
[[gnu::target("avx2,fma")]] void pack_strips(i64 rows, i64 k, const float* a, i64 a_row, i64 a_k, float* out) {
  static_assert(tile_rows == 3);
  for (i64 t = 0; t < rows; t += tile_rows) {
    float* strip = out + t * k;
    const i64 n = std::min(tile_rows, rows - t);
    if (n == 3 && a_k == 1) {
      const float *a0 = a + t * a_row, *a1 = a0 + a_row, *a2 = a1 + a_row;
      for (i64 kk = 0; kk < k; ++kk) {
        strip[3 * kk] = a0[kk];
        strip[3 * kk + 1] = a1[kk];
        strip[3 * kk + 2] = a2[kk];
      }
      continue;
    }
    for (i64 kk = 0; kk < k; ++kk)
      for (i64 r = 0; r < tile_rows; ++r) strip[kk * tile_rows + r] = r < n ? a[(t + r) * a_row + kk * a_k] : 0.f;
  }
}

}  // namespace

void panel_tiles(std::int64_t m, std::int64_t w, std::int64_t width, const float* a, std::int64_t a_row,
                 std::int64_t a_k, const float* p, std::int64_t ld, std::int64_t k, float* c, std::int64_t ldc,
                 float alpha, float beta, const gemm_epilogue& e) {
  tiles(m, w, width, a, a_row, a_k, tile_rows * a_row, p, ld, k, c, ldc, alpha, beta, e);
}

void row_blocks(std::int64_t m, std::int64_t w, std::int64_t k, const float* a, std::int64_t a_row,
                std::int64_t a_k, const float* panels, std::int64_t n, std::int64_t j0, float* c, std::int64_t ldc,
                float alpha, float beta, const gemm_epilogue& e) {
  thread_local std::vector<float> strips_buffer;
  float* const strips = line_aligned(strips_buffer, block_rows * k);  // one block of op(A)
  for (i64 i0 = 0; i0 < m; i0 += block_rows) {
    const i64 rows = std::min(block_rows, m - i0);
    pack_strips(rows, k, a + i0 * a_row, a_row, a_k, strips);
    for (i64 jj = 0; jj < w; jj += 32) {
      const i64 at = j0 + jj, width = (std::min<i64>(32, n - at) + 15) / 16 * 16;
      const gemm_epilogue ej = e.at(i0, jj);
      tiles(rows, std::min<i64>(32, w - jj), width, strips, 1, tile_rows, tile_rows * k, panels + at * k,
            width, k, c + i0 * ldc + jj, ldc, alpha, beta, ej);
    }
  }
}

#else

bool available() { return false; }
void pack_panel(bool, const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, float*, std::int64_t) {}
void panel_tiles(std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t, std::int64_t, const float*,
                 std::int64_t, std::int64_t, float*, std::int64_t, float, float, const gemm_epilogue&) {}
void pack_row_panels(const float*, std::int64_t, std::int64_t, std::int64_t, float*, std::int64_t, std::int64_t) {}
void row_blocks(std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t, std::int64_t, const float*,
                std::int64_t, std::int64_t, float*, std::int64_t, float, float, const gemm_epilogue&) {}

#endif

}  // namespace loom::ops::sgemm_avx2
