// loom's single-precision GEMM on CPUs with AVX2 and FMA but no AVX-512: the tiles and the
// panel packing of sgemm_avx512.cpp in 8-lane vectors. Same panels (32 columns, the last 16 or
// 32, zero-padded past N), same order of operations for every element (one chain of fused
// multiply-adds over k, then alpha, beta and the epilogue), so the same bits as the AVX-512
// kernel. Private to ops/: sgemm_avx512.cpp calls it.
#pragma once

#include <cstdint>

#include "sgemm_avx512.hpp"  // gemm_epilogue

namespace loom::ops::sgemm_avx2 {

/// Whether the CPU has AVX2 and FMA.
bool available();

/// Rows of C per tile (3 rows × 32 columns: 12 of the 16 vector registers hold sums).
constexpr std::int64_t tile_rows = 3;

/// The panel of columns [j0, j0 + w) of op(B) (b [K, N], or bᵀ when trans_b: b is [N, K]) into
/// panel, `width` (16 or 32, ≥ w) floats per row, zero past w.
void pack_panel(bool trans_b, const float* b, std::int64_t ldb, std::int64_t j0, std::int64_t w, std::int64_t k,
                float* panel, std::int64_t width);

/// C's rows [0, m) × columns [0, w) of one panel: c = alpha · op(A) · panel + beta · c, then the
/// epilogue (its pointers at the panel's first column and at row 0). op(A)'s element (i, k) is
/// a[i · a_row + k · a_k]; the panel's row k is at p + k · ld, `width` floats readable (16 or 32).
void panel_tiles(std::int64_t m, std::int64_t w, std::int64_t width, const float* a, std::int64_t a_row,
                 std::int64_t a_k, const float* p, std::int64_t ld, std::int64_t k, float* c, std::int64_t ldc,
                 float alpha, float beta, const gemm_epilogue& e);

}  // namespace loom::ops::sgemm_avx2
