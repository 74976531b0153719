// The AVX-512 pieces shared by loom's float GEMM and GEMV (sgemm_avx512.cpp, sgemv_avx512.cpp):
// lane masks, the store of a finished sum with alpha, beta and the epilogue, and the GEMM's
// copies of its operands (sgemm_packing.cpp). Private to ops/.
#pragma once

#include "cpu_features.hpp"  // cpu(): whether the CPU has AVX-512F

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>

#include "sgemm_avx512.hpp"  // gemm_epilogue

namespace loom::ops::avx512_lanes {

using i64 = std::int64_t;

/// The first w lanes of a vector of 16 (none for w <= 0, all for w >= 16).
inline __mmask16 first_lanes(i64 w) { return static_cast<__mmask16>(w >= 16 ? 0xFFFFu : w <= 0 ? 0u : (1u << w) - 1); }
// The lanes of the last vector of a row of w >= 1 floats.
inline __mmask16 last_lanes(i64 w) { return first_lanes((w - 1) % 16 + 1); }

// c[j] = alpha · sum + beta · c[j] for the lanes of `keep` (c not read when beta is 0): the
// epilogue of every tile and GEMV.
[[gnu::target("avx512f"), gnu::always_inline]] inline __m512 scaled(const float* c, __m512 sum, float alpha, float beta,
                                                                  __mmask16 keep) {
  __m512 x = alpha == 1.f ? sum : _mm512_mul_ps(_mm512_set1_ps(alpha), sum);  // the same bits
  if (beta != 0.f) x = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(keep, c), x);
  return x;
}
[[gnu::target("avx512f"), gnu::always_inline]] inline void put_lanes(float* c, __m512 sum, float alpha, float beta,
                                                                   __mmask16 keep) {
  _mm512_mask_storeu_ps(c, keep, scaled(c, sum, alpha, beta, keep));
}

// put_lanes, then the epilogue's bias, relu and residual for row r, columns j.. of a tile, e's
// pointers at the tile's first column and first element (max(0, y) as std::max(y, 0): y
// itself when y is NaN or −0).
[[gnu::target("avx512f"), gnu::always_inline]] inline void put_lanes(float* c, __m512 sum, float alpha, float beta,
                                                                   __mmask16 keep, const gemm_epilogue& e, i64 r,
                                                                   i64 j) {
  __m512 x = scaled(c, sum, alpha, beta, keep);
  if (e.bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(keep, e.bias + j));
  if (e.relu) x = _mm512_max_ps(_mm512_setzero_ps(), x);
  if (e.residual) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(keep, e.residual + r * e.ldr + j));
  _mm512_mask_storeu_ps(c, keep, x);
}

}  // namespace loom::ops::avx512_lanes

// The copies of the operands into the layouts the float GEMM's tiles read (sgemm_packing.cpp).
namespace loom::ops::avx512_packing {

using i64 = std::int64_t;

/// The panel of columns [j0, j0 + w) of op(B) = b ([K, N]) into `panel`, `width` (16 or 32)
/// floats per row of K, zero past w.
[[gnu::target("avx512f")]] void pack_rows(const float* b, i64 ldb, i64 j0, i64 w, i64 k, float* panel, i64 width);

/// The same panel of op(B) = bᵀ (b [N, K], row j of b is column j of op(B)).
[[gnu::target("avx512f")]] void pack_transposed(const float* b, i64 ldb, i64 j0, i64 w, i64 k, float* panel,
                                                i64 width);

/// Rows [0, rows) of op(A) = aᵀ (a [K, ·], row kk at a + kk · lda; row i of op(A) is column i
/// of a) into strips of `tile` (≤ 16) rows: strip s at out + s · tile · k, its element (r, kk) at
/// kk · tile + r, the order a tile broadcasts them in. Past `rows`, the last strip's rows are not
/// written (its tile reads only its own rows).
[[gnu::target("avx512f")]] void pack_strips(i64 rows, i64 k, const float* a, i64 lda, i64 tile, float* out);

}  // namespace loom::ops::avx512_packing
#endif
