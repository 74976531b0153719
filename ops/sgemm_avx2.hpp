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

/// Panels [p0, p1) of op(B) = b ([K, N], n columns) into out, panel p at out + p · 32 · k (its
/// width 16 or 32 its row stride): sgemm_pack_panels' layout, pack_panel's contents.
void pack_row_panels(const float* b, std::int64_t ldb, std::int64_t n, std::int64_t k, float* out, std::int64_t p0,
                     std::int64_t p1);

/// C's rows [0, m) × columns [0, w) of one panel: c = alpha · op(A) · panel + beta · c, then the
/// epilogue (its pointers at the panel's first column and at row 0). op(A)'s element (i, k) is
/// a[i · a_row + k · a_k]; the panel's row k is at p + k · ld, `width` floats readable (16 or 32).
void panel_tiles(std::int64_t m, std::int64_t w, std::int64_t width, const float* a, std::int64_t a_row,
                 std::int64_t a_k, const float* p, std::int64_t ld, std::int64_t k, float* c, std::int64_t ldc,
                 float alpha, float beta, const gemm_epilogue& e);

/// Products of more rows than this go in row blocks (row_blocks).
constexpr std::int64_t many_rows = 256;

/// Rows per block of row_blocks: 32 strips of 3 rows (with K = 1024, 384 KiB of op(A)).
constexpr std::int64_t block_rows = 96;

/// The product of a large op(A) (m > many_rows) with an op(B) whose panels are all packed
/// (sgemm_pack_panels' layout: n columns in all, this product's w columns from column j0, a
/// multiple of 32): c = alpha · op(A) · op(B) + beta · c, then the epilogue (its pointers at the
/// product's first column and row). Row blocks of block_rows rows outside the panels, each block
/// of op(A) copied once into strips of tile_rows rows that its tiles read in order, then every
/// panel over it: the block stays in the second-level cache while the panels pass, where
/// panel_tiles over all of op(A) streams it from the third level once per panel. The same
/// chains of FMAs, so the same bits.
void row_blocks(std::int64_t m, std::int64_t w, std::int64_t k, const float* a, std::int64_t a_row,
                std::int64_t a_k, const float* panels, std::int64_t n, std::int64_t j0, float* c, std::int64_t ldc,
                float alpha, float beta, const gemm_epilogue& e);

}  // namespace loom::ops::sgemm_avx2
