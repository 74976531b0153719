// int8 weight products (see int8_gemm.hpp). Each row of x is quantized to int16 first (qx, one
// scale per row). The AVX-512 kernel then computes a tile of 4 output channels × up to 4 rows:
// for each block of 32 columns, each channel's 32 int8 weights are widened to int16 once
// (vpmovsxbw) and multiplied into every row's 16 int32 lanes (AVX512_VNNI's vpdpwssd): 32
// multiply-adds an instruction. CPUs without AVX512_VNNI take the portable loop. Every 512 columns, the four channels'
// lanes of a row are summed together (exact in int32 there) into 64-bit totals. The sums are
// exact integers, so the order of the lanes does not matter and every path gives the same S.
//
// What bounds it, measured on AMD EPYC (Zen 4), 1 thread, November 2026 (a standalone loop over
// 2 MB of int8 weights, 1 row of x): vpdpwssd and vpdpbusd on 512-bit vectors complete one every
// two cycles there, so 16 multiply-adds a cycle at most — 57–66 GB/s of int8 weights with the
// widening, where the bytes alone stream at 82–84 GB/s from L3. Splitting qx into two unsigned
// bytes for vpdpbusd (no widening, two instructions per 64 columns) measured no faster (55–57
// GB/s); widening the weights to float for FMAs, 1.3× float's GEMV only (three 512-bit
// instructions per 16 multiply-adds). Figures of the decode case: bench/README.md.
#include "int8_gemm.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "loom/core/errors.hpp"
#include "loom/core/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LOOM_INT8_AVX512 1
// GCC 12's shuffle intrinsics pass an "undefined" vector as their unused merge source, which
// -Wmaybe-uninitialized reports once they are inlined (a false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace loom::ops {

namespace {

using i64 = std::int64_t;
constexpr i64 block_channels = 64;  // output channels of one parallel chunk
constexpr i64 tile_channels = 4, tile_rows = 4;
// Columns whose products 16 int32 lanes hold, summed together, without overflow: each lane
// adds two products of at most 127 · 32767 per 32 columns, so 16 lanes over 512 columns stay
// below 512 · 127 · 32767 < 2^31.
constexpr i64 exact_columns = 512;
constexpr float qx_max = 32767.f;

// The rows of x quantized to int16 (the header's qx and sx), rows `stride` apart (the weights'
// stride, so the padding past cols is zero like theirs), and whether each row is finite.
struct quantized_rows {
  i64 stride = 0;
  std::unique_ptr<std::int16_t[]> q;
  std::unique_ptr<float[]> scale;
  std::unique_ptr<std::uint8_t[]> finite;
  quantized_rows(i64 m, i64 s)
      : stride(s),
        q(new std::int16_t[static_cast<std::size_t>(m * s)]()),
        scale(new float[static_cast<std::size_t>(m)]()),
        finite(new std::uint8_t[static_cast<std::size_t>(m)]()) {}
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

// A non-finite row's output (the header's fallback): float products, in k order, times scale.
float dot_float(const std::int8_t* q, const float* x, i64 cols) {
  float s = 0;
  for (i64 k = 0; k < cols; ++k) s = std::fma(x[k], static_cast<float>(q[k]), s);
  return s;
}

float output(std::int64_t total, float scale_w, float sx) { return static_cast<float>(total) * (scale_w * sx); }

// Rows [i0, i1) of x × channels [j0, j1), one output at a time.
void channels_portable(i64 i0, i64 i1, const float* x, i64 ldx, const quantized_rows& xq, const int8_weights& w,
                       float* y, i64 ldy, i64 j0, i64 j1) {
  for (i64 i = i0; i < i1; ++i)
    for (i64 j = j0; j < j1; ++j) {
      const std::int8_t* q = w.q + j * w.stride;
      if (!xq.finite[i]) {
        y[i * ldy + j] = w.scale[j] * dot_float(q, x + i * ldx, w.cols);
        continue;
      }
      const std::int16_t* qx = xq.q.get() + i * xq.stride;
      std::int64_t total = 0;
      for (i64 k = 0; k < w.cols; ++k) total += static_cast<std::int64_t>(q[k]) * qx[k];
      y[i * ldy + j] = output(total, w.scale[j], xq.scale[i]);
    }
}

#ifdef LOOM_INT8_AVX512

#define LOOM_INT8_TARGET gnu::target("avx512f,avx512bw")
#define LOOM_INT8_VNNI_TARGET gnu::target("avx512f,avx512bw,avx512vnni")

[[LOOM_INT8_TARGET]] void quantize_row_vnni(const float* x, i64 cols, std::int16_t* q, float& sx,
                                                std::uint8_t& finite) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 largest = zero, probe = zero;  // probe: Σ x · 0, a NaN when some x is not finite
  for (i64 k = 0; k < cols; k += 16) {
    const __mmask16 mask = cols - k >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (cols - k)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + k);
    largest = _mm512_max_ps(largest, _mm512_abs_ps(v));
    probe = _mm512_add_ps(probe, _mm512_mul_ps(v, zero));
  }
  if (std::isnan(_mm512_reduce_add_ps(probe))) return;
  finite = 1;
  sx = _mm512_reduce_max_ps(largest) / qx_max;
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

// Lane c of the result: the sum of a_c's 16 lanes (exact while it fits int32: exact_columns).
[[LOOM_INT8_TARGET, gnu::always_inline]] inline __m128i sum4(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
  const __m512i u01 = _mm512_add_epi32(_mm512_shuffle_i32x4(a0, a1, 0x44), _mm512_shuffle_i32x4(a0, a1, 0xEE));
  const __m512i u23 = _mm512_add_epi32(_mm512_shuffle_i32x4(a2, a3, 0x44), _mm512_shuffle_i32x4(a2, a3, 0xEE));
  const __m512i v = _mm512_add_epi32(_mm512_shuffle_i32x4(u01, u23, 0x88), _mm512_shuffle_i32x4(u01, u23, 0xDD));
  const __m512i h2 = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
  const __m512i h1 = _mm512_add_epi32(h2, _mm512_shuffle_epi32(h2, _MM_PERM_CDAB));
  const __m512i first = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
  return _mm512_castsi512_si128(_mm512_permutexvar_epi32(first, h1));
}

// Channels [j, j + C) (C ≤ 4) × rows [i, i + R) of x (all finite): the header's S, then y. One
// row has two sets of accumulators (even and odd blocks of 32 columns, added at the end: the
// integer sums are exact in any order), so that eight multiply-add chains hide the latency.
template <int C, int R>
[[LOOM_INT8_VNNI_TARGET]] void tile(const quantized_rows& xq, i64 i, const int8_weights& w, i64 j, float* y, i64 ldy) {
  constexpr int U = R == 1 ? 2 : 1;  // blocks of 32 columns per step
  std::int64_t total[R][tile_channels] = {};
  const std::int8_t* q = w.q + j * w.stride;
  const std::int16_t* qx = xq.q.get() + i * xq.stride;
  for (i64 k0 = 0; k0 < w.cols; k0 += exact_columns) {
    // up to the next multiple of 32 · U past the columns: the padding of q and qx is zero
    const i64 k1 = std::min(w.cols, k0 + exact_columns);
    __m512i acc[U][R][tile_channels];
    for (int u = 0; u < U; ++u)
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < tile_channels; ++c) acc[u][r][c] = _mm512_setzero_si512();
    for (i64 k = k0; k < k1; k += 32 * U)
      for (int u = 0; u < U; ++u) {
        __m512i wv[C];
        for (int c = 0; c < C; ++c)
          wv[c] = _mm512_cvtepi8_epi16(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + c * w.stride + k + 32 * u)));
        for (int r = 0; r < R; ++r) {
          const __m512i xv = _mm512_loadu_si512(qx + r * xq.stride + k + 32 * u);
          for (int c = 0; c < C; ++c) acc[u][r][c] = _mm512_dpwssd_epi32(acc[u][r][c], xv, wv[c]);
        }
      }
    for (int r = 0; r < R; ++r) {
      if constexpr (U == 2)  // the 512 columns' lanes together stay within int32 (exact_columns)
        for (int c = 0; c < C; ++c) acc[0][r][c] = _mm512_add_epi32(acc[0][r][c], acc[1][r][c]);
      alignas(16) std::int32_t sums[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(sums), sum4(acc[0][r][0], acc[0][r][C > 1 ? 1 : 0],
                                                             acc[0][r][C > 2 ? 2 : 0], acc[0][r][C > 3 ? 3 : 0]));
      for (int c = 0; c < C; ++c) total[r][c] += sums[c];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[r * ldy + j + c] = output(total[r][c], w.scale[j + c], xq.scale[i + r]);
}

template <int C>
[[LOOM_INT8_VNNI_TARGET]] void tile_any_rows(int rows, const quantized_rows& xq, i64 i, const int8_weights& w, i64 j,
                                             float* y, i64 ldy) {
  switch (rows) {
    case 1: return tile<C, 1>(xq, i, w, j, y, ldy);
    case 2: return tile<C, 2>(xq, i, w, j, y, ldy);
    case 3: return tile<C, 3>(xq, i, w, j, y, ldy);
    default: return tile<C, 4>(xq, i, w, j, y, ldy);
  }
}

// Rows [i0, i1) of x, all finite, × channels [j0, j1); y points at row i0.
[[LOOM_INT8_VNNI_TARGET]] void finite_rows(i64 i0, i64 i1, const quantized_rows& xq, const int8_weights& w, float* y,
                                           i64 ldy, i64 j0, i64 j1) {
  for (i64 j = j0; j < j1; j += tile_channels) {
    const int c = static_cast<int>(std::min(tile_channels, j1 - j));
    for (i64 i = i0; i < i1; i += tile_rows) {
      const int r = static_cast<int>(std::min(tile_rows, i1 - i));
      float* yi = y + (i - i0) * ldy;
      switch (c) {
        case 1: tile_any_rows<1>(r, xq, i, w, j, yi, ldy); break;
        case 2: tile_any_rows<2>(r, xq, i, w, j, yi, ldy); break;
        case 3: tile_any_rows<3>(r, xq, i, w, j, yi, ldy); break;
        default: tile_any_rows<4>(r, xq, i, w, j, yi, ldy); break;
      }
    }
  }
}

const bool has_vnni = [] {
  __builtin_cpu_init();  // this runs among the static constructors
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}();

// The channels [j0, j1) of every row: runs of finite rows through the kernel, the others alone.
void channels_vnni(i64 m, const float* x, i64 ldx, const quantized_rows& xq, const int8_weights& w, float* y,
                   i64 ldy, i64 j0, i64 j1) {
  for (i64 i = 0; i < m;) {
    if (!xq.finite[i]) {
      channels_portable(i, i + 1, x, ldx, xq, w, y, ldy, j0, j1);
      ++i;
      continue;
    }
    i64 end = i;
    while (end < m && xq.finite[end]) ++end;
    finite_rows(i, end, xq, w, y + i * ldy, ldy, j0, j1);
    i = end;
  }
}

#endif

bool vectorised() {
#ifdef LOOM_INT8_AVX512
  return has_vnni;
#else
  return false;
#endif
}

// Every row of x quantized (the header's qx and sx).
quantized_rows quantize_x(i64 m, const float* x, i64 ldx, const int8_weights& w, bool portable) {
  quantized_rows r(m, w.stride);
  for (i64 i = 0; i < m; ++i) {
    std::int16_t* q = r.q.get() + i * r.stride;
#ifdef LOOM_INT8_AVX512
    if (!portable && has_vnni) {
      quantize_row_vnni(x + i * ldx, w.cols, q, r.scale[i], r.finite[i]);
      continue;
    }
#endif
    quantize_row_portable(x + i * ldx, w.cols, q, r.scale[i], r.finite[i]);
  }
  (void)portable;
  return r;
}

}  // namespace

void int8_gemm(std::int64_t m, const float* x, std::int64_t ldx, const int8_weights& w, float* y, std::int64_t ldy) {
  if (m <= 0 || w.rows <= 0) return;
  const quantized_rows xq = quantize_x(m, x, ldx, w, false);
  const i64 blocks = (w.rows + block_channels - 1) / block_channels;
  for_chunks(blocks, 1, [&](i64 b0, i64 b1) {
    const i64 j0 = b0 * block_channels, j1 = std::min(w.rows, b1 * block_channels);
#ifdef LOOM_INT8_AVX512
    if (has_vnni) return channels_vnni(m, x, ldx, xq, w, y, ldy, j0, j1);
#endif
    channels_portable(0, m, x, ldx, xq, w, y, ldy, j0, j1);
  });
}

void int8_gemm_portable(std::int64_t m, const float* x, std::int64_t ldx, const int8_weights& w, float* y,
                        std::int64_t ldy) {
  if (m <= 0 || w.rows <= 0) return;
  const quantized_rows xq = quantize_x(m, x, ldx, w, true);
  channels_portable(0, m, x, ldx, xq, w, y, ldy, 0, w.rows);
}

bool int8_gemm_vectorised() { return vectorised(); }

}  // namespace loom::ops
