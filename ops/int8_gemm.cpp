// int8 weight products (see int8_gemm.hpp). Each row of x is quantized to int16 first (qx, one
// scale per row). The weights lie in blocks of 16 output channels whose column pairs are
// interleaved (int8_weights): 32 bytes hold one pair (k, k + 1) of 16 channels. So the AVX-512
// kernel widens those 32 bytes to int16 (vpmovsxbw) and multiplies them with the pair of x
// broadcast to every 32-bit lane (AVX512_VNNI's vpdpwssd): 32 multiply-adds into 16 channels'
// sums, lane c holding channel c's — no horizontal sums at the end, one sequential stream of
// weights. A tile is 4 blocks (64 channels) × up to 4 rows of x; every 512 columns the int32
// lanes are added into 64-bit totals. The sums are exact integers, so every path (this kernel,
// the portable loop, any split of rows or channels) gives the same bits.
//
// What bounds it, measured on AMD EPYC (Zen 4), 1 thread, November 2026 (a standalone loop over
// 2 MB of int8 weights, one row of x): vpdpwssd and vpdpbusd on 512-bit vectors complete one
// every two cycles there, so 16 multiply-adds a cycle at most — 57–66 GB/s of int8 weights with
// the widening, where the bytes alone stream at 82–84 GB/s from L3. For the record, three other
// forms measured slower: the weights widened to float for FMAs (three 512-bit instructions per
// 16 multiply-adds: 1.3× float's GEMV); qx split into two unsigned bytes for vpdpbusd (two
// instructions per 64 columns: no faster than the widening); rows of weights with a horizontal
// sum per channel at the end (1.85× float's GEMV, against this layout's 2.65×). Figures of the
// decode case: bench/README.md.
//
// Without AVX512_VNNI (AVX2 CPUs, AVX-512 ones without VNNI) an AVX2 kernel reads the same
// layout: each 32-byte pair of a block widened in two halves (channels 0–7, then 8–15) and
// multiplied by the broadcast pair of x with vpmaddwd, whose 32-bit lanes are the same two
// products added as vpdpwssd's (exact: at most 2 · 128 · 32767 each), then added in int32 for
// at most exact_pairs pairs and into 64-bit totals; the same bits again.
#include "int8_gemm.hpp"

#include "cpu_features.hpp"
#include "sgemm_avx512.hpp"  // sgemm_avx512_tiling: a run forced onto the AVX2 kernels

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "loom/core/errors.hpp"
#include "loom/core/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LOOM_INT8_AVX512 1
#define LOOM_INT8_AVX2 1
// GCC 12's widening and 256-bit extract intrinsics pass an "undefined" vector as their unused
// merge source, which -Wmaybe-uninitialized reports once they are inlined (a false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace loom::ops {

namespace {

using i64 = std::int64_t;
constexpr i64 block_rows = 16;    // output channels of a block of the layout (int8_weights)
constexpr i64 chunk_blocks = 4;   // blocks of one parallel chunk and of a tile: 64 channels
constexpr i64 tile_rows = 4;      // rows of x in a tile
// Column pairs whose products a 32-bit lane holds without overflow: two products of at most
// 127 · 32767 a pair, so 256 pairs (512 columns) stay below 512 · 127 · 32767 < 2^31.
constexpr i64 exact_pairs = 256;
constexpr float qx_max = 32767.f;

// The rows of x quantized to int16 (the header's qx and sx), rows `stride` apart (the weights'
// padded_cols, the padding zero), and whether each row is finite.
// One allocation per call (a thread-local buffer would not do: a thread waiting for its chunks
// may run another node's product meanwhile).
struct quantized_rows {
  i64 stride = 0;
  std::unique_ptr<std::byte[]> bytes;  // scale (m floats), then q (m · stride int16), then finite (m)
  float* scale;
  std::int16_t* q;
  std::uint8_t* finite;
  quantized_rows(i64 m, i64 s)
      : stride(s),
        bytes(new std::byte[static_cast<std::size_t>(m * (4 + 2 * s + 1))]()),
        scale(reinterpret_cast<float*>(bytes.get())),
        q(reinterpret_cast<std::int16_t*>(bytes.get() + 4 * m)),
        finite(reinterpret_cast<std::uint8_t*>(bytes.get() + 4 * m + 2 * m * s)) {}
};

void quantize_row_portable(const float* x, i64 cols, std::int16_t* q, float& sx, std::uint8_t& finite) {
  float largest = 0;
  for (i64 k = 0; k < cols; ++k) {
    if (!std::isfinite(x[k])) return;  // finite stays 0: the float fallback computes this row
    largest = std::max(largest, std::fabs(x[k]));
  }
  finite = 1;
  sx = largest / qx_max;
  if (sx == 0) return;  // qx stays 0
  for (i64 k = 0; k < cols; ++k)
    q[k] = static_cast<std::int16_t>(std::clamp(std::nearbyint(x[k] / sx), -qx_max, qx_max));
}

// A vector quantization's lanes reduced (a maximum and a NaN test, exact in any order): false
// when some lane's probe Σ x · 0 is a NaN (an x not finite), else the largest magnitude.
bool lanes_finite_largest(const float* largest, const float* probe, int lanes, float& row_largest) {
  row_largest = 0;
  for (int l = 0; l < lanes; ++l) {
    if (std::isnan(probe[l])) return false;
    row_largest = std::max(row_largest, largest[l]);
  }
  return true;
}

// Rows [i0, i1) of x × channels [j0, j1), one output at a time: the exact sum, or for a row
// that is not finite the header's fallback (float products in k order, times scale).
void channels_portable(i64 i0, i64 i1, const float* x, i64 ldx, const quantized_rows& xq, const int8_weights& w,
                       float* y, i64 ldy, i64 j0, i64 j1) {
  for (i64 i = i0; i < i1; ++i)
    for (i64 j = j0; j < j1; ++j) {
      if (!xq.finite[i]) {
        const float* xi = x + i * ldx;
        float s = 0;
        for (i64 k = 0; k < w.cols; ++k) s = std::fma(xi[k], static_cast<float>(w.at(j, k)), s);
        y[i * ldy + j] = w.scale[j] * s;
        continue;
      }
      const std::int16_t* qx = xq.q + i * xq.stride;
      std::int64_t total = 0;
      for (i64 k = 0; k < w.cols; ++k) total += static_cast<std::int64_t>(w.at(j, k)) * qx[k];
      y[i * ldy + j] = static_cast<float>(total) * (w.scale[j] * xq.scale[i]);
    }
}

#ifdef LOOM_INT8_AVX512

#define LOOM_INT8_VNNI_TARGET gnu::target("avx512f,avx512bw,avx512dq,avx512vnni")

[[LOOM_INT8_VNNI_TARGET]] void quantize_row_vnni(const float* x, i64 cols, std::int16_t* q, float& sx,
                                                   std::uint8_t& finite) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 largest = zero, probe = zero;  // probe: Σ x · 0, a NaN when some x is not finite
  for (i64 k = 0; k < cols; k += 16) {
    const __mmask16 mask = cols - k >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (cols - k)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + k);
    largest = _mm512_max_ps(largest, _mm512_abs_ps(v));
    probe = _mm512_add_ps(probe, _mm512_mul_ps(v, zero));
  }
  // the lanes reduced in memory (GCC 12's _mm512_reduce_* intrinsics warn of their own
  // undefined vectors)
  alignas(64) float lanes_largest[16], lanes_probe[16];
  _mm512_store_ps(lanes_largest, largest);
  _mm512_store_ps(lanes_probe, probe);
  float row_largest;
  if (!lanes_finite_largest(lanes_largest, lanes_probe, 16, row_largest)) return;
  finite = 1;
  sx = row_largest / qx_max;
  if (sx == 0) return;
  const __m512 scale = _mm512_set1_ps(sx);
  const __m512i hi = _mm512_set1_epi32(32767), lo = _mm512_set1_epi32(-32767);
  for (i64 k = 0; k < cols; k += 16) {
    const __mmask16 mask = cols - k >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (cols - k)) - 1);
    // x / sx rounded by the MXCSR (to nearest even, as nearbyint), clamped, narrowed
    const __m512i t = _mm512_cvtps_epi32(_mm512_div_ps(_mm512_maskz_loadu_ps(mask, x + k), scale));
    _mm512_mask_cvtepi32_storeu_epi16(q + k, mask, _mm512_max_epi32(_mm512_min_epi32(t, hi), lo));
  }
}

// Blocks [b0, b0 + B) of channels × rows [i, i + R) of x (all finite): lane c of acc[r][b] sums
// channel 16 (b0 + b) + c's products with row i + r, 512 columns at a time into 64-bit totals.
template <int B, int R>
[[LOOM_INT8_VNNI_TARGET]] void tile(const quantized_rows& xq, i64 i, const int8_weights& w, i64 b0, float* y, i64 ldy) {
  const i64 pairs = w.padded_cols / 2, used = (w.cols + 1) / 2;  // the pairs past `used` are zero
  const std::int8_t* q = w.q + b0 * pairs * 32;
  const std::int16_t* qx = xq.q + i * xq.stride;
  __m512i low[R][B], high[R][B];  // the totals: lanes 0-7 and 8-15, as 64-bit integers
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) low[r][b] = high[r][b] = _mm512_setzero_si512();
  for (i64 p0 = 0; p0 < used; p0 += exact_pairs) {
    const i64 p1 = std::min(used, p0 + exact_pairs);
    __m512i acc[R][B];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_si512();
    for (i64 p = p0; p < p1; ++p) {
      __m512i wv[B];
      for (int b = 0; b < B; ++b)
        wv[b] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + (b * pairs + p) * 32)));
      for (int r = 0; r < R; ++r) {
        std::int32_t pair;
        std::memcpy(&pair, qx + r * xq.stride + 2 * p, sizeof pair);  // qx[2p] low, qx[2p + 1] high
        const __m512i xv = _mm512_set1_epi32(pair);
        for (int b = 0; b < B; ++b) acc[r][b] = _mm512_dpwssd_epi32(acc[r][b], xv, wv[b]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) {
        low[r][b] = _mm512_add_epi64(low[r][b], _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc[r][b])));
        high[r][b] = _mm512_add_epi64(high[r][b], _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc[r][b], 1)));
      }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 sx = _mm512_set1_ps(xq.scale[i + r]);
    for (int b = 0; b < B; ++b) {
      const i64 j = (b0 + b) * block_rows;
      const __m512 total = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtepi64_ps(low[r][b])),
                                              _mm512_cvtepi64_ps(high[r][b]), 1);
      const __m512 out = _mm512_mul_ps(total, _mm512_mul_ps(_mm512_loadu_ps(w.scale + j), sx));
      const i64 valid = std::min(block_rows, w.rows - j);
      _mm512_mask_storeu_ps(y + r * ldy + j, static_cast<__mmask16>((1u << valid) - 1), out);
    }
  }
}

template <int B>
[[LOOM_INT8_VNNI_TARGET]] void tile_any_rows(int rows, const quantized_rows& xq, i64 i, const int8_weights& w, i64 b0,
                                             float* y, i64 ldy) {
  switch (rows) {
    case 1: return tile<B, 1>(xq, i, w, b0, y, ldy);
    case 2: return tile<B, 2>(xq, i, w, b0, y, ldy);
    case 3: return tile<B, 3>(xq, i, w, b0, y, ldy);
    default: return tile<B, 4>(xq, i, w, b0, y, ldy);
  }
}

// Rows [i0, i1) of x, all finite, × channel blocks [b0, b1) (at most chunk_blocks); y points at
// row i0.
[[LOOM_INT8_VNNI_TARGET]] void finite_rows(i64 i0, i64 i1, const quantized_rows& xq, const int8_weights& w, float* y,
                                           i64 ldy, i64 b0, i64 b1) {
  for (i64 i = i0; i < i1; i += tile_rows) {
    const int r = static_cast<int>(std::min(tile_rows, i1 - i));
    float* yi = y + (i - i0) * ldy;
    switch (b1 - b0) {
      case 1: tile_any_rows<1>(r, xq, i, w, b0, yi, ldy); break;
      case 2: tile_any_rows<2>(r, xq, i, w, b0, yi, ldy); break;
      case 3: tile_any_rows<3>(r, xq, i, w, b0, yi, ldy); break;
      default: tile_any_rows<4>(r, xq, i, w, b0, yi, ldy); break;
    }
  }
}

#endif

#ifdef LOOM_INT8_AVX2

#define LOOM_INT8_AVX2_TARGET gnu::target("avx2")

// quantize_row_portable in eight lanes (the same bits: the largest magnitude is exact in any
// order, and x / sx rounded by the MXCSR is nearbyint's rounding to nearest even).
[[LOOM_INT8_AVX2_TARGET]] void quantize_row_avx2(const float* x, i64 cols, std::int16_t* q, float& sx,
                                                 std::uint8_t& finite) {
  const __m256 zero = _mm256_setzero_ps(), magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF'FFFF));
  __m256 largest = zero, probe = zero;  // probe: Σ x · 0, a NaN when some x is not finite
  i64 k = 0;
  for (; k + 8 <= cols; k += 8) {
    const __m256 v = _mm256_loadu_ps(x + k);
    largest = _mm256_max_ps(largest, _mm256_and_ps(v, magnitude));
    probe = _mm256_add_ps(probe, _mm256_mul_ps(v, zero));
  }
  alignas(32) float lanes_largest[8], lanes_probe[8];
  _mm256_store_ps(lanes_largest, largest);
  _mm256_store_ps(lanes_probe, probe);
  float row_largest;
  if (!lanes_finite_largest(lanes_largest, lanes_probe, 8, row_largest)) return;  // finite stays 0
  for (i64 t = k; t < cols; ++t) {
    if (!std::isfinite(x[t])) return;
    row_largest = std::max(row_largest, std::fabs(x[t]));
  }
  finite = 1;
  sx = row_largest / qx_max;
  if (sx == 0) return;  // qx stays 0
  const __m256 scale = _mm256_set1_ps(sx);
  const __m256i hi = _mm256_set1_epi32(32767), lo = _mm256_set1_epi32(-32767);
  for (k = 0; k + 8 <= cols; k += 8) {
    const __m256i t = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x + k), scale));
    const __m256i c = _mm256_max_epi32(_mm256_min_epi32(t, hi), lo);
    // narrowed in each 128-bit half (values in range), the halves' low 64 bits gathered
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(c, c), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm256_castsi256_si128(packed));
  }
  for (; k < cols; ++k) q[k] = static_cast<std::int16_t>(std::clamp(std::nearbyint(x[k] / sx), -qx_max, qx_max));
}

// Blocks [b0, b0 + B) of channels × rows [i, i + R) of x (all finite), as `tile` above: the
// int32 sums of channels 16 (b0 + b) + 0–7 in acc[r][b][0], 8–15 in acc[r][b][1].
template <int B, int R>
[[LOOM_INT8_AVX2_TARGET]] void tile_avx2(const quantized_rows& xq, i64 i, const int8_weights& w, i64 b0, float* y,
                                         i64 ldy) {
  const i64 pairs = w.padded_cols / 2, used = (w.cols + 1) / 2;  // the pairs past `used` are zero
  const std::int8_t* q = w.q + b0 * pairs * 32;
  const std::int16_t* qx = xq.q + i * xq.stride;
  std::int64_t total[R][B * block_rows] = {};
  for (i64 p0 = 0; p0 < used; p0 += exact_pairs) {
    const i64 p1 = std::min(used, p0 + exact_pairs);
    __m256i acc[R][B][2];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) acc[r][b][0] = acc[r][b][1] = _mm256_setzero_si256();
    for (i64 p = p0; p < p1; ++p) {
      __m256i xv[R];
      for (int r = 0; r < R; ++r) {
        std::int32_t pair;
        std::memcpy(&pair, qx + r * xq.stride + 2 * p, sizeof pair);  // qx[2p] low, qx[2p + 1] high
        xv[r] = _mm256_set1_epi32(pair);
      }
      for (int b = 0; b < B; ++b) {
        const std::int8_t* src = q + (b * pairs + p) * 32;
        const __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
        const __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16)));
        for (int r = 0; r < R; ++r) {
          acc[r][b][0] = _mm256_add_epi32(acc[r][b][0], _mm256_madd_epi16(lo, xv[r]));
          acc[r][b][1] = _mm256_add_epi32(acc[r][b][1], _mm256_madd_epi16(hi, xv[r]));
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) {
        alignas(32) std::int32_t lanes[block_rows];
        _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[r][b][0]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8), acc[r][b][1]);
        for (i64 c = 0; c < block_rows; ++c) total[r][b * block_rows + c] += lanes[c];
      }
  }
  for (int r = 0; r < R; ++r) {
    const float sx = xq.scale[i + r];
    for (int b = 0; b < B; ++b) {
      const i64 j = (b0 + b) * block_rows, valid = std::min(block_rows, w.rows - j);
      for (i64 c = 0; c < valid; ++c)
        y[r * ldy + j + c] = static_cast<float>(total[r][b * block_rows + c]) * (w.scale[j + c] * sx);
    }
  }
}

// Rows [i0, i1) of x, all finite, × channel blocks [b0, b1) (at most chunk_blocks); y points at
// row i0. Pairs of rows take two blocks at a time (12 of the 16 registers), single rows four.
[[LOOM_INT8_AVX2_TARGET]] void finite_rows_avx2(i64 i0, i64 i1, const quantized_rows& xq, const int8_weights& w,
                                                float* y, i64 ldy, i64 b0, i64 b1) {
  for (i64 i = i0; i < i1;) {
    float* yi = y + (i - i0) * ldy;
    if (i1 - i >= 2) {
      for (i64 b = b0; b < b1; b += 2)
        if (b1 - b >= 2) tile_avx2<2, 2>(xq, i, w, b, yi, ldy);
        else tile_avx2<1, 2>(xq, i, w, b, yi, ldy);
      i += 2;
      continue;
    }
    switch (b1 - b0) {
      case 1: tile_avx2<1, 1>(xq, i, w, b0, yi, ldy); break;
      case 2: tile_avx2<2, 1>(xq, i, w, b0, yi, ldy); break;
      case 3: tile_avx2<3, 1>(xq, i, w, b0, yi, ldy); break;
      default: tile_avx2<4, 1>(xq, i, w, b0, yi, ldy); break;
    }
    ++i;
  }
}

#endif

// The kernels int8_gemm runs: AVX512_VNNI's where the CPU has it, unless the products are forced
// onto the AVX2 kernels (LOOM_SGEMM_ISA=avx2 or sgemm_force_isa: a whole run, or the tests, on
// AVX2), then AVX2's, else the portable loop.
enum class int8_path { portable, avx2, vnni };

int8_path chosen_path() {
  const bool forced_avx2 = std::strcmp(sgemm_avx512_tiling().isa, "avx2") == 0;
#ifdef LOOM_INT8_AVX512
  if (cpu().avx512_vnni && !forced_avx2) return int8_path::vnni;
#endif
#ifdef LOOM_INT8_AVX2
  if (cpu().avx2_fma) return int8_path::avx2;
#endif
  (void)forced_avx2;
  return int8_path::portable;
}

// Channel blocks [b0, b1) of every row on `path`: runs of finite rows through its kernel, the
// other rows alone through the portable loop.
void blocks(int8_path path, i64 m, const float* x, i64 ldx, const quantized_rows& xq, const int8_weights& w, float* y,
            i64 ldy, i64 b0, i64 b1) {
  if (path == int8_path::portable) {
    channels_portable(0, m, x, ldx, xq, w, y, ldy, b0 * block_rows, std::min(w.rows, b1 * block_rows));
    return;
  }
  for (i64 i = 0; i < m;) {
    if (!xq.finite[i]) {
      channels_portable(i, i + 1, x, ldx, xq, w, y, ldy, b0 * block_rows, std::min(w.rows, b1 * block_rows));
      ++i;
      continue;
    }
    i64 end = i;
    while (end < m && xq.finite[end]) ++end;
#ifdef LOOM_INT8_AVX512
    if (path == int8_path::vnni) finite_rows(i, end, xq, w, y + i * ldy, ldy, b0, b1);
#endif
#ifdef LOOM_INT8_AVX2
    if (path == int8_path::avx2) finite_rows_avx2(i, end, xq, w, y + i * ldy, ldy, b0, b1);
#endif
    i = end;
  }
}

// Every row of x quantized (the header's qx and sx): AVX-512 instructions on the VNNI path, AVX2
// on the AVX2 path, the portable loop on the portable one (the same bits).
quantized_rows quantize_x(i64 m, const float* x, i64 ldx, const int8_weights& w, int8_path path) {
  quantized_rows r(m, w.padded_cols);
  for (i64 i = 0; i < m; ++i) {
    std::int16_t* q = r.q + i * r.stride;
#ifdef LOOM_INT8_AVX512
    if (path == int8_path::vnni) {
      quantize_row_vnni(x + i * ldx, w.cols, q, r.scale[i], r.finite[i]);
      continue;
    }
#endif
#ifdef LOOM_INT8_AVX2
    if (path == int8_path::avx2) {
      quantize_row_avx2(x + i * ldx, w.cols, q, r.scale[i], r.finite[i]);
      continue;
    }
#endif
    quantize_row_portable(x + i * ldx, w.cols, q, r.scale[i], r.finite[i]);
  }
  (void)path;
  return r;
}

// int8_gemm on `path`: parallel over chunks of channel blocks.
void product_on(int8_path path, i64 m, const float* x, i64 ldx, const int8_weights& w, float* y, i64 ldy) {
  if (m <= 0 || w.rows <= 0) return;
  const quantized_rows xq = quantize_x(m, x, ldx, w, path);
  const i64 blocks_total = (w.rows + block_rows - 1) / block_rows;
  const i64 chunks = (blocks_total + chunk_blocks - 1) / chunk_blocks;
  // tasks of about 2^16 multiply-adds (4 µs on one Zen 4 core): a decoding step's smaller
  // products run on their thread, without a task per chunk (the bits do not depend on it)
  const i64 grain = grain_for(chunk_blocks * block_rows * w.cols * m, i64{1} << 16);
  for_chunks(chunks, grain, [&](i64 c0, i64 c1) {
    for (i64 c = c0; c < c1; ++c) {
      const i64 b0 = c * chunk_blocks;
      blocks(path, m, x, ldx, xq, w, y, ldy, b0, std::min(blocks_total, b0 + chunk_blocks));
    }
  });
}

}  // namespace

void int8_gemm(std::int64_t m, const float* x, std::int64_t ldx, const int8_weights& w, float* y, std::int64_t ldy) {
  product_on(chosen_path(), m, x, ldx, w, y, ldy);
}

void int8_gemm_portable(std::int64_t m, const float* x, std::int64_t ldx, const int8_weights& w, float* y,
                        std::int64_t ldy) {
  if (m <= 0 || w.rows <= 0) return;
  const quantized_rows xq = quantize_x(m, x, ldx, w, int8_path::portable);
  channels_portable(0, m, x, ldx, xq, w, y, ldy, 0, w.rows);
}

bool int8_gemm_avx2(std::int64_t m, const float* x, std::int64_t ldx, const int8_weights& w, float* y,
                    std::int64_t ldy) {
#ifdef LOOM_INT8_AVX2
  if (!cpu().avx2_fma) return false;
  product_on(int8_path::avx2, m, x, ldx, w, y, ldy);
  return true;
#else
  (void)m, (void)x, (void)ldx, (void)w, (void)y, (void)ldy;
  return false;
#endif
}

const char* int8_gemm_kernel() {
  switch (chosen_path()) {
    case int8_path::vnni: return "avx512_vnni";
    case int8_path::avx2: return "avx2";
    default: return "portable";
  }
}

}  // namespace loom::ops
