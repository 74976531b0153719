// The AVX-512 copies of loom's float GEMM (sgemm_avx512.cpp): op(B) into the panels its tiles
// read, op(A) into the strips they broadcast from. Private to ops/.
#include "sgemm_avx512.hpp"
#include "sgemm_lanes.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "loom/core/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's unpack and shuffle intrinsics pass an "undefined" vector as their unused merge
// source, which -Wmaybe-uninitialized reports once they are inlined (a false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace loom::ops::avx512_packing {

using avx512_lanes::first_lanes;

[[gnu::target("avx512f")]] void pack_rows(const float* b, i64 ldb, i64 j0, i64 w, i64 k, float* panel, i64 width) {
  const __mmask16 first = first_lanes(w), second = first_lanes(w - 16);
  for (i64 kk = 0; kk < k; ++kk) {
    const float* src = b + kk * ldb + j0;
    float* out = panel + kk * width;
    _mm512_storeu_ps(out, _mm512_maskz_loadu_ps(first, src));
    if (width == 32) _mm512_storeu_ps(out + 16, _mm512_maskz_loadu_ps(second, src + 16));
  }
}

// 16 × 16 blocks transposed in registers (three rounds of unpacks and lane shuffles), ragged
// edges one by one.
[[gnu::target("avx512f")]] void pack_transposed(const float* b, i64 ldb, i64 j0, i64 w, i64 k, float* panel,
                                                i64 width) {
  i64 jb = 0;
  for (; jb + 16 <= w; jb += 16) {
    const float* src = b + (j0 + jb) * ldb;
    i64 kb = 0;
    for (; kb + 16 <= k; kb += 16) {
      __m512 r[16], t[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ldb + kb);
      for (int i = 0; i < 8; ++i) {  // per 128-bit lane: pairs of rows interleaved
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
      for (int g = 0; g < 4; ++g) {  // per lane L: rows 4g..4g+3 of column 4L + q in r[4g + q]
        const __m512d a0 = _mm512_castps_pd(t[4 * g]), a1 = _mm512_castps_pd(t[4 * g + 1]);
        const __m512d a2 = _mm512_castps_pd(t[4 * g + 2]), a3 = _mm512_castps_pd(t[4 * g + 3]);
        r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
        r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
        r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
        r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
      }
      for (int q = 0; q < 4; ++q) {  // lane L of the four groups gathered: column 4L + q
        const __m512 v = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88), x = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xDD);
        const __m512 v2 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88),
                     x2 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xDD);
        float* out = panel + (kb + q) * width + jb;
        _mm512_storeu_ps(out, _mm512_shuffle_f32x4(v, v2, 0x88));               // column q
        _mm512_storeu_ps(out + 4 * width, _mm512_shuffle_f32x4(x, x2, 0x88));   // column 4 + q
        _mm512_storeu_ps(out + 8 * width, _mm512_shuffle_f32x4(v, v2, 0xDD));   // column 8 + q
        _mm512_storeu_ps(out + 12 * width, _mm512_shuffle_f32x4(x, x2, 0xDD));  // column 12 + q
      }
    }
    for (i64 jj = jb; jj < jb + 16; ++jj)
      for (i64 kk = kb; kk < k; ++kk) panel[kk * width + jj] = b[(j0 + jj) * ldb + kk];
  }
  for (i64 jj = jb; jj < w; ++jj)
    for (i64 kk = 0; kk < k; ++kk) panel[kk * width + jj] = b[(j0 + jj) * ldb + kk];
  if (width != w)
    for (i64 kk = 0; kk < k; ++kk) std::fill(panel + kk * width + w, panel + (kk + 1) * width, 0.f);
}

// One piece of `tile` floats (8 or 12) from src to dst, unmasked (on AMD Zen 4 a masked store
// made the copy several times slower).
[[gnu::target("avx512f"), gnu::always_inline]] inline void copy_piece(const float* src, float* dst, i64 tile) {
  _mm256_storeu_ps(dst, _mm256_loadu_ps(src));
  if (tile == 12) _mm_storeu_ps(dst + 8, _mm_loadu_ps(src + 8));
}

// Sixteen lines of a at a time, strip by strip: each strip gets 16 pieces in a run (strip by strip
// over all of K, the reads met a new line K times per strip; line by line, the writes went to
// every strip at once, their lines tile · k floats apart in one set of the first-level cache).
// [AMD EPYC Zen 4, 256 rows of a [1024, 1024]: 0.38 ms line by line, 0.25 in sixteens; 0.11 and
// 0.03 ms for a [1024, 256]]
[[gnu::target("avx512f")]] void pack_strips(i64 rows, i64 k, const float* a, i64 lda, i64 tile, float* out) {
  constexpr i64 lines = 16;
  const i64 whole = rows / tile * tile;
  const __mmask16 last = first_lanes(rows - whole);
  for (i64 k0 = 0; k0 < k; k0 += lines) {
    const i64 k1 = std::min(k, k0 + lines);
    for (i64 t = 0; t < whole; t += tile) {
      float* strip = out + t * k;
      for (i64 kk = k0; kk < k1; ++kk) copy_piece(a + kk * lda + t, strip + kk * tile, tile);
    }
    if (whole < rows)
      for (i64 kk = k0; kk < k1; ++kk)
        _mm512_mask_storeu_ps(out + whole * k + kk * tile, last, _mm512_maskz_loadu_ps(last, a + kk * lda + whole));
  }
}

}  // namespace loom::ops::avx512_packing

namespace loom::ops {

sgemm_packed_a::sgemm_packed_a(bool trans_a, std::int64_t m, std::int64_t k, const float* a, std::int64_t lda)
    : trans_(trans_a), m_(m), k_(k), a_(a), lda_(lda) {
  const sgemm_tiling t = sgemm_avx512_tiling();
  if (!trans_a || std::strcmp(t.isa, "avx512") != 0 || m < 1 || k < 1 || m * k > (std::int64_t{1} << 22)) return;
  tile_ = t.rows;
  storage_ = take_packing_buffer<float>();
  float* const out = line_aligned(storage_, (m + tile_ - 1) / tile_ * tile_ * k);
  const std::int64_t strips = (m + tile_ - 1) / tile_;
  for_chunks(strips, grain_for(tile_ * k, 1 << 16), [&](std::int64_t s0, std::int64_t s1) {
    const std::int64_t r0 = s0 * tile_;
    avx512_packing::pack_strips(std::min(m, s1 * tile_) - r0, k, a + r0, lda, tile_, out + r0 * k);
  });
  strips_ = out;
}

sgemm_packed_a::~sgemm_packed_a() { give_packing_buffer(std::move(storage_)); }

}  // namespace loom::ops

#endif
