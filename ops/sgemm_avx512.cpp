// loom's single-precision GEMM (see sgemm_avx512.hpp). op(B) is copied one panel of 32 columns
// at a time into a [K, 32] buffer (the last [K, 16] or [K, 32], zero-padded past N) before its
// tiles use it, unless B is [K, N] already, N a multiple of 16 and B's row stride not a multiple
// of 4 KiB; or once for all the row chunks that share it (sgemm_packed_b), or for all the blocks of
// rows of a product whose op(A) spans more than 2 MiB (row_blocks). op(A) is read in place,
// one element broadcast per row and k, unless it is transposed and four whole panels or more
// read it: then it is first copied into strips of the tile's rows (run_over_a). A tile of 8 rows
// × 32 columns (12 rows where timed faster: sgemm_avx512_tiling) keeps its sums in AVX-512
// registers over the whole of K; columns past a ragged N are masked off when C is read and
// written; the epilogue (bias, relu, residual) is applied in registers. CPUs without AVX-512 run
// the same panels through sgemm_avx2.cpp (products of many rows there in row blocks over op(B)
// packed once: sgemm_avx2::row_blocks); without x86-64 intrinsics, sgemm_none.cpp declines
// every product.
//
// Measured on AMD EPYC (Zen 4), 1 thread (bench/bench_gemm, hot caches), against OpenBLAS
// 0.3.21's sgemm (its Cooperlake kernel): 1.07–1.16× on all 13 shapes there (the tiny and small
// models' layers and weight gradients, the fused attention's blocks, 1024³), 1.7× on a 16³
// attention block.
#include "sgemm_avx512.hpp"
#include "sgemm_avx2.hpp"
#include "sgemm_choice.hpp"
#include "sgemm_lanes.hpp"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <limits>
#include <cstdint>
#include <utility>
#include <vector>

#include "loom/core/parallel.hpp"
#include "packing_pool.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LOOM_SGEMM_AVX512 1
// GCC 12's unpack and shuffle intrinsics pass an "undefined" vector as their unused merge
// source, which -Wmaybe-uninitialized reports once they are inlined (a false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace loom::ops {

#if LOOM_SGEMM_AVX512
namespace {

using i64 = std::int64_t;
using avx512_lanes::first_lanes;
using avx512_lanes::last_lanes;
using avx512_lanes::put_lanes;
using avx512_packing::pack_rows;
using avx512_packing::pack_strips;
using avx512_packing::pack_transposed;

// The largest N and K it takes (see sgemm_avx512.hpp): any N (the columns are independent), K up
// to 4096 (a panel of [4096, 32] floats is 512 KiB, within every second-level cache it met).
// op(B) is packed whole once (sgemm_packed_b) only up to max_packed floats; wider operands are
// packed a panel at a time by each product, as OpenBLAS would (the same bits).
constexpr i64 max_n = std::numeric_limits<int>::max(), max_k = 4096;
constexpr i64 max_packed = i64{1} << 20;
// Rows that packs_b takes as "many" (more than 32) when the product's rows are not known yet.
constexpr i64 many_rows = 1024;

// The K steps of a tile: acc[r][v] += op(A)(r, kk) · panel row kk, kk = 0..k−1 in order. Unit:
// op(A)'s rows one float apart (strips, or A transposed and read in place), element (r, kk) at
// a[r + kk·stride], row r a fixed offset from one pointer. Otherwise A is read in place by rows,
// element (r, kk) at a[r·stride + kk]: every third row has a pointer and the two after it are one
// and two strides past it. A pointer per row, with op(B)'s pointer, its stride and the count,
// outgrew the general registers at 12 rows (GCC kept one in a vector register and moved it back
// at every step, on port 0, an FMA's).
template <int R, int NV, bool Unit>
[[gnu::target("avx512f"), gnu::always_inline]] inline void k_steps(__m512 (&acc)[R][NV], const float* a, i64 stride,
                                                                  const float* b, i64 ldb, i64 k) {
  constexpr int bases = Unit ? 1 : (R + 2) / 3;
  const float* p[bases];
#pragma GCC unroll 4
  for (int q = 0; q < bases; ++q) p[q] = a + 3 * q * stride;
  for (i64 kk = 0; kk < k; ++kk) {
    __m512 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
    b += ldb;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(Unit ? p[0][r] : p[r / 3][r % 3 * stride]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < bases; ++q) p[q] += Unit ? stride : 1;
  }
}

// R rows × 16·NV columns of C from op(A) (element (i, k) at a[i·a_row + k·a_k], a_row = 1 or
// a_k = 1: every layout of a_layout) and a panel of op(B) (row k at b + k·ldb, 16·NV floats
// readable); `last` masks the columns of the last vector that C has (all 16 but at the right
// edge of a ragged N).
template <int R, int NV>
[[gnu::target("avx512f"), gnu::always_inline]] inline void tile(const float* a, i64 a_row, i64 a_k, const float* b,
                                                                i64 ldb, i64 k, float* c, i64 ldc, float alpha,
                                                                float beta, __mmask16 last, const gemm_epilogue& e) {
  // the lines of the row's columns: NV + 1 when not aligned
  e.prefetch_reads<R, NV + 1>(c, ldc, beta, [&] { return 16 * (NV - 1) + __builtin_popcount(last) - 1; });
  __m512 acc[R][NV];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  assert(a_row == 1 || a_k == 1);  // k_steps's two layouts
  if (a_row == 1) k_steps<R, NV, true>(acc, a, a_k, b, ldb, k);
  else k_steps<R, NV, false>(acc, a, a_row, b, ldb, k);
  if (beta == 0.f && !e.bias && !e.relu && !e.residual && last == 0xFFFF) {
    // whole vectors and nothing but alpha (attention's scores, most products): put_lanes'
    // operations with its tests, and the lane masks, out of the stores; each test per vector
    // reloaded e's fields (C might alias them), a sixth of the instructions with K = 32
    const __m512 va = _mm512_set1_ps(alpha);
    const bool scaled = alpha != 1.f;  // multiplying by 1 gives the same bits, but costs
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v)
        _mm512_storeu_ps(c + r * ldc + 16 * v, scaled ? _mm512_mul_ps(va, acc[r][v]) : acc[r][v]);
    return;
  }
  const gemm_epilogue ep = e;  // a copy the stores to C cannot alias
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      put_lanes(c + r * ldc + 16 * v, acc[r][v], alpha, beta, v == NV - 1 ? last : __mmask16(0xFFFF), ep, r, 16 * v);
}

template <int NV>
[[gnu::target("avx512f")]] void tile_rows(int rows, const float* a, i64 a_row, i64 a_k, const float* b, i64 ldb, i64 k,
                                          float* c, i64 ldc, float alpha, float beta, __mmask16 last,
                                          const gemm_epilogue& e) {
  switch (rows) {
    case 12: return tile<12, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
    case 11: return tile<11, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
    case 10: return tile<10, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
    case 9: return tile<9, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
    case 8: return tile<8, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
    case 7: return tile<7, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
    case 6: return tile<6, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
    case 5: return tile<5, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
    case 4: return tile<4, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
    case 3: return tile<3, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
    case 2: return tile<2, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
    default: return tile<1, NV>(a, a_row, a_k, b, ldb, k, c, ldc, alpha, beta, last, e);
  }
}

using sgemm_choice::chosen_isa;
using sgemm_choice::isa_t;

}  // namespace

bool sgemm_avx512_takes(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k) {
  return chosen_isa() != isa_t::none && !(trans_a && trans_b) && n >= 16 && n <= max_n && k >= 1 && k <= max_k && m >= 1;
}

namespace {

constexpr i64 panel_cols = 32;


// Whether op(B) is copied into panels ([K, 32], the last [K, 16] or [K, 32], zero-padded past N)
// rather than read in place: unless it is [K, N] already and N needs no padding. Read in place,
// a panel's rows are K lines ldb floats apart; when that stride is a multiple of 4 KiB they all
// map to the same L1 and L2 sets and evict each other, so then (and only for M > 32: fewer rows
// do not repay the copy) it is copied. Other strides read in place were faster than the copy on
// AMD EPYC (Zen 4), bench_gemm 1 thread: tiny_dw 108 → 116 GFLOP/s, tiny_dx 113 → 116, small_dx
// 111 → 114, row strides of 256–768 floats 1–4% faster; a stride of 1024 floats 4% slower.
// A panel whose K rows spread over more of B than the CPU's in_place_span (1 MiB on Zen 4, 512 KiB
// elsewhere: sgemm_choice.cpp) is copied too: its 2·K lines then share too few second-level sets
// (an Intel Xeon, family 6 model 207, bench_gemm 1 thread, in place → copied: wide_dx 61 → 142
// GFLOP/s, wide_dw 71 → 134).
// The AVX2 kernel always copies: its tiles of 3 rows read each panel row for fewer FMAs (same
// CPU, forced AVX2, GFLOP/s in place → copied: tiny_dx 85.6 → 105.7, small_dx 88.6 → 109.7)
bool packs_b(isa_t isa, bool trans_b, i64 m, i64 n, i64 k, i64 ldb) {
  return isa == isa_t::avx2 || trans_b || n % 16 != 0 ||
         (m > 32 && (ldb % 1024 == 0 || k * ldb > sgemm_choice::in_place_span()));
}

// The panel of columns [j0, j0 + w) of op(B) into panel, `width` (16 or 32) wide, either ISA.
void pack_panel(isa_t isa, bool trans_b, const float* b, i64 ldb, i64 j0, i64 w, i64 k, float* panel, i64 width) {
  if (isa == isa_t::avx2) sgemm_avx2::pack_panel(trans_b, b, ldb, j0, w, k, panel, width);
  else if (trans_b) pack_transposed(b, ldb, j0, w, k, panel, width);
  else pack_rows(b, ldb, j0, w, k, panel, width);
}

// How the tiles read op(A): element (i, k) of the tile of rows [t · tile, ...) at
// a + t · tile_stride + (i − t · tile) · row + k · step.
struct a_layout {
  const float* a;
  i64 row, step, tile_stride;
};

// op(A) read in place (A [M, K], or [K, M] when transposed), in tiles of `tile` rows.
a_layout in_place(bool trans_a, const float* a, i64 lda, i64 tile) {
  const i64 row = trans_a ? 1 : lda;
  return {a, row, trans_a ? lda : 1, tile * row};
}

// The product's tiles of tile_rows_max rows (8 or 12), panel by panel: panel(j0, w, width) gives the panel of columns
// [j0, j0 + w) of op(B) (width = w rounded up to 16) and its row stride. The AVX2 kernel reads
// op(A) in place only (its layout's tile_stride is not used).
template <class Panel>
void run_panels(isa_t isa, i64 tile_rows_max, const a_layout& a, i64 m, i64 n, i64 k, float alpha, Panel&& panel,
                float beta, float* c, i64 ldc, const gemm_epilogue& epilogue) {
  for (i64 j0 = 0; j0 < n; j0 += panel_cols) {
    const i64 w = std::min(panel_cols, n - j0), width = (w + 15) / 16 * 16;
    const __mmask16 last = last_lanes(w);
    const auto [p, ld] = panel(j0, w, width);
    if (isa == isa_t::avx2) {
      sgemm_avx2::panel_tiles(m, w, width, a.a, a.row, a.step, p, ld, k, c + j0, ldc, alpha, beta, epilogue.at(0, j0));
      continue;
    }
    for (i64 i0 = 0; i0 < m; i0 += tile_rows_max) {
      const int rows = static_cast<int>(std::min(tile_rows_max, m - i0));
      const float* at = a.a + i0 / tile_rows_max * a.tile_stride;
      const gemm_epilogue e = epilogue.at(i0, j0);
      if (width == 32)
        tile_rows<2>(rows, at, a.row, a.step, p, ld, k, c + i0 * ldc + j0, ldc, alpha, beta, last, e);
      else tile_rows<1>(rows, at, a.row, a.step, p, ld, k, c + i0 * ldc + j0, ldc, alpha, beta, last, e);
    }
  }
}

// Floats of op(A) copied into strips at a time (run_over_a): 1 MiB, K = 1024 in blocks of 256 rows.
constexpr i64 strip_floats = i64{1} << 18;
// Whole panels (N ≥ 32 · copied_panels) a product needs for run_over_a to copy op(A): with 2
// (the tiny model's weight gradients, [256, 512]ᵀ · [512, 64]) the copy cost more than it saved,
// 115 → 106 GFLOP/s on hot caches; with 8 ([256, 1024]ᵀ · [1024, 256]) it saved more, 108 → 110
// hot and ~88 → ~98 with the operands in the outer caches (AMD EPYC Zen 4, 1 thread).
constexpr i64 copied_panels = 4;

// Floats of op(A) whose rows run over every panel of op(B) before the next rows do (row_blocks):
// 2 MiB, 512 rows of K = 1024. Without the blocks each panel read all M rows of op(A) (and wrote
// all of C's) again from the outer caches, one 4 KiB page per row when K = 1024, beyond the TLB's
// reach. Intel Xeon (family 6 model 207), bench_gemm 1 thread, GFLOP/s, median of 5 alternating
// runs on a noisy host, no blocks → blocks of 2 MiB (1 MiB): cube 139.6 → 147.6 (149.6), wide_dw
// 121.6 → 138.2 (124.2); wide_dx ([256, 1536] · [1536, 512]) 140.5 → 142.0 unsplit (123.6 split
// in two: why not 1 MiB). OpenBLAS beside them: 139–151. (lm_head_32k, too small to be split,
// ran 122.7 and 132.5 in the same runs: the host's noise.)
constexpr i64 a_block_floats = i64{1} << 19;

// Rows of op(A) that run over every panel of op(B) before the next rows do (row_blocks).
i64 row_block(i64 k, i64 tile) { return std::max<i64>(1, a_block_floats / (tile * k)) * tile; }

template <class Panel>
void run_over_a(isa_t isa, bool trans_a, i64 m, i64 n, i64 k, float alpha, const float* a, i64 lda, Panel&& panel,
                bool packed_panels, float beta, float* c, i64 ldc, const gemm_epilogue& e);

// run_over_a in blocks of row_block rows, each over all of op(B)'s panels, which `panel` must give
// without copying (op(B) read in place or packed whole): a block's rows of op(A) and of C then
// stay in the second-level cache and within the TLB's reach while the panels pass, instead of
// all M rows coming back from the outer caches for every panel.
template <class Panel>
void row_blocks(isa_t isa, bool trans_a, i64 m, i64 n, i64 k, float alpha, const float* a, i64 lda, Panel&& panel,
                bool packed_panels, float beta, float* c, i64 ldc, const gemm_epilogue& e) {
  const i64 tile = sgemm_choice::tile_rows(isa, packed_panels), most = row_block(k, tile);
  const i64 blocks = (m + most - 1) / most;  // as few as fit, of equal whole tiles but the last
  const i64 block = ((m + blocks - 1) / blocks + tile - 1) / tile * tile;
  for (i64 i0 = 0; i0 < m; i0 += block)
    run_over_a(isa, trans_a, std::min(block, m - i0), n, k, alpha, a + (trans_a ? i0 : i0 * lda), lda, panel,
               packed_panels, beta, c + i0 * ldc, ldc, e.at(i0, 0));
}

// run_panels over op(A), which a transposed A read by copied_panels whole panels or more is first
// copied for, into strips of the tile's rows (pack_strips): read in place, each tile takes one
// 32- or 48-byte piece from each of K lines of A, lda floats apart, at every panel — a weight
// gradient's dzᵀ, lines 1–4 KiB apart, came from the outer caches each time. Strips of at most
// strip_floats floats, the panels run over each block of rows in turn. The same elements in the
// same order of FMAs: the same bits. AVX-512 only (the AVX2 kernel blocks K instead).
// `packed_panels`: whether `panel` gives copied panels (else op(B) read in place), for the tile's rows.
template <class Panel>
void run_over_a(isa_t isa, bool trans_a, i64 m, i64 n, i64 k, float alpha, const float* a, i64 lda, Panel&& panel,
                bool packed_panels, float beta, float* c, i64 ldc, const gemm_epilogue& e) {
  const i64 tile = sgemm_choice::tile_rows(isa, packed_panels);
  if (isa != isa_t::avx512 || !trans_a || n < copied_panels * panel_cols)
    return run_panels(isa, tile, in_place(trans_a, a, lda, tile), m, n, k, alpha, panel, beta, c, ldc, e);
  const i64 block = std::max<i64>(1, strip_floats / (tile * k)) * tile;
  thread_local std::vector<float> buffer;  // nothing else runs on this thread until the product is done
  float* const strips = line_aligned(buffer, std::min(block, (m + tile - 1) / tile * tile) * k);
  for (i64 i0 = 0; i0 < m; i0 += block) {
    const i64 rows = std::min(block, m - i0);
    pack_strips(rows, k, a + i0, lda, tile, strips);
    run_panels(isa, tile, a_layout{strips, 1, tile, tile * k}, rows, n, k, alpha, panel, beta, c + i0 * ldc, ldc,
               e.at(i0, 0));
  }
}

// sgemm_avx512's product, op(A) read from `strips` (pack_strips, tiles of strip_rows rows) when
// not null and the products still run on AVX-512 tiles of that height, else from a.
bool product(bool trans_a, bool trans_b, i64 m, i64 n, i64 k, float alpha, const float* a, i64 lda,
             const float* strips, i64 strip_rows, const float* b, i64 ldb, float beta, float* c, i64 ldc,
             const gemm_epilogue& epilogue) {
  if (!sgemm_avx512_takes(trans_a, trans_b, m, n, k)) return false;
  const isa_t isa = chosen_isa();
  // the strips' own height, unless tiles of another height were forced since they were copied
  const int forced = sgemm_choice::forced_tile_rows();
  if (isa != isa_t::avx512 || (forced != 0 && forced != strip_rows)) strips = nullptr;
  const bool pack = packs_b(isa, trans_b, m, n, k, ldb);
  // many rows: in blocks of rows (sgemm_avx2::row_blocks; row_blocks), each over all of op(B),
  // which is then packed whole once (sgemm_packed_b, when it would be copied and fits) or read in place
  const bool blocks = isa == isa_t::avx2
                          ? m > sgemm_avx2::many_rows
                          : isa == isa_t::avx512 && !strips && m > row_block(k, sgemm_choice::tile_rows(isa, pack));
  if (blocks && pack && n > panel_cols)
    if (const sgemm_packed_b pb(trans_b, n, k, b, ldb); pb.packed())
      return sgemm_avx512(trans_a, m, alpha, a, lda, pb, beta, c, ldc, epilogue);
  if (blocks && !pack && isa == isa_t::avx512) {
    const auto in_place_panel = [&](i64 j0, i64, i64) -> std::pair<const float*, i64> { return {b + j0, ldb}; };
    row_blocks(isa, trans_a, m, n, k, alpha, a, lda, in_place_panel, false, beta, c, ldc, epilogue);
    return true;
  }
  thread_local std::vector<float> buffer;  // nothing else runs on this thread until the product is done
  float* const panel_buffer = pack ? line_aligned(buffer, k * panel_cols) : nullptr;
  const auto panel = [&](i64 j0, i64 w, i64 width) -> std::pair<const float*, i64> {
    if (!pack) return {b + j0, ldb};
    pack_panel(isa, trans_b, b, ldb, j0, w, k, panel_buffer, width);
    return {panel_buffer, width};
  };
  if (strips)
    run_panels(isa, strip_rows, a_layout{strips, 1, strip_rows, strip_rows * k}, m, n, k, alpha, panel, beta, c, ldc,
               epilogue);
  else run_over_a(isa, trans_a, m, n, k, alpha, a, lda, panel, pack, beta, c, ldc, epilogue);
  return true;
}

}  // namespace

bool sgemm_avx512(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc,
                const gemm_epilogue& epilogue) {
  return product(trans_a, trans_b, m, n, k, alpha, a, lda, nullptr, 0, b, ldb, beta, c, ldc, epilogue);
}

bool sgemm_avx512(const sgemm_packed_a& a, bool trans_b, std::int64_t n, float alpha, const float* b, std::int64_t ldb,
                  float beta, float* c, std::int64_t ldc) {
  return product(a.trans_, trans_b, a.m_, n, a.k_, alpha, a.a_, a.lda_, a.strips_, a.tile_, b, ldb, beta, c, ldc, {});
}

namespace {

// ---- timing the tile's rows, for a CPU not in sgemm_choice.cpp's table ----

// Times `rows`-row tiles on a [96, 256] · [256, 256] product (96 rows: whole tiles of 8 and of
// 12), op(B) read in place (b) or from its copied panels (panels: b packed), the best of `rounds`
// calls, in seconds.
double time_rows(i64 rows, int rounds, const float* a, const float* b, const float* panels, float* c) {
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run_panels(
        isa_t::avx512, rows, in_place(false, a, 256, rows), 96, 256, 256, 1.f,
        [&](i64 j0, i64, i64) -> std::pair<const float*, i64> {
          return panels ? std::pair<const float*, i64>{panels + j0 * 256, panel_cols}
                        : std::pair<const float*, i64>{b + j0, 256};
        },
        0.f, c, 256, {});
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

// The rows of the faster tile for op(B) in place (packed false) or in copied panels.
i64 sgemm_choice::measure_rows(bool packed) {
  // both shapes in alternating rounds (the first warms the caches), the best of each
  std::vector<float> a(96 * 256), b(256 * 256), c(96 * 256), panels(packed ? 256 * 256 : 0);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.5f - 1.f;
  for (i64 j0 = 0; packed && j0 < 256; j0 += panel_cols)
    pack_panel(isa_t::avx512, false, b.data(), 256, j0, panel_cols, 256, panels.data() + j0 * 256, panel_cols);
  const float* p = packed ? panels.data() : nullptr;
  double t8 = 1e30, t12 = 1e30;
  for (int round = 0; round < 4; ++round) {
    t8 = std::min(t8, time_rows(8, 2, a.data(), b.data(), p, c.data()));
    t12 = std::min(t12, time_rows(12, 2, a.data(), b.data(), p, c.data()));
  }
  return t12 < 0.97 * t8 ? 12 : 8;  // 12 only when clearly faster
}

namespace {

// Panels [p0, p1) of op(B) [k, n] into out (panel p at out + p · 32 · k, whatever its width).
void pack_panels(isa_t isa, bool trans_b, const float* b, i64 ldb, i64 n, i64 k, float* out, i64 p0, i64 p1) {
  if (isa == isa_t::avx2 && !trans_b) return sgemm_avx2::pack_row_panels(b, ldb, n, k, out, p0, p1);
  for (i64 p = p0; p < p1; ++p) {
    const i64 j0 = p * panel_cols, w = std::min(panel_cols, n - j0);
    pack_panel(isa, trans_b, b, ldb, j0, w, k, out + j0 * k, (w + 15) / 16 * 16);
  }
}

// The product with columns [j0, j0 + w) of an op(B) of n columns packed by pack_panels (j0 a
// multiple of 32); each stored panel's own width is its row stride.
void from_packed(bool trans_a, i64 m, i64 w, i64 k, float alpha, const float* a, i64 lda, const float* panels, i64 n,
                 i64 j0, float beta, float* c, i64 ldc, const gemm_epilogue& epilogue) {
  const isa_t isa = chosen_isa();
  if (isa == isa_t::avx2 && m > sgemm_avx2::many_rows)
    return sgemm_avx2::row_blocks(m, w, k, a, trans_a ? 1 : lda, trans_a ? lda : 1, panels, n, j0, c, ldc, alpha,
                                  beta, epilogue);
  row_blocks(
      isa, trans_a, m, w, k, alpha, a, lda,
      [&](i64 jj, i64, i64) -> std::pair<const float*, i64> {
        const i64 at = j0 + jj;
        return {panels + at * k, (std::min(panel_cols, n - at) + 15) / 16 * 16};
      },
      true, beta, c, ldc, epilogue);
}

}  // namespace

sgemm_packed_b::sgemm_packed_b(bool trans_b, std::int64_t n, std::int64_t k, const float* b, std::int64_t ldb)
    : trans_(trans_b), n_(n), k_(k), b_(b), ldb_(ldb) {
  // as for a product of many rows; the bits do not depend on whether it is packed
  const isa_t isa = chosen_isa();
  if (!sgemm_avx512_takes(false, trans_b, 1, n, k) || n * k > max_packed || !packs_b(isa, trans_b, many_rows, n, k, ldb))
    return;
  storage_ = take_packing_buffer<float>();
  float* const out = line_aligned(storage_, sgemm_panels_size(n, k));
  for_chunks((n + panel_cols - 1) / panel_cols, grain_for(k * panel_cols, 1 << 16),
             [&](std::int64_t p0, std::int64_t p1) { pack_panels(isa, trans_b, b, ldb, n, k, out, p0, p1); });
  panels_ = out;
}

sgemm_packed_b::~sgemm_packed_b() { give_packing_buffer(std::move(storage_)); }

std::int64_t sgemm_panels_size(std::int64_t n, std::int64_t k) { return (n + panel_cols - 1) / panel_cols * panel_cols * k; }

bool sgemm_pack_panels(bool trans_b, std::int64_t n, std::int64_t k, const float* b, std::int64_t ldb, float* out) {
  if (!sgemm_avx512_takes(false, trans_b, 1, n, k)) return false;
  pack_panels(chosen_isa(), trans_b, b, ldb, n, k, out, 0, (n + panel_cols - 1) / panel_cols);
  return true;
}

bool sgemm_avx512_panels(std::int64_t m, std::int64_t w, std::int64_t k, float alpha, const float* a, std::int64_t lda,
                         const float* panels, std::int64_t n, std::int64_t j0, float beta, float* c, std::int64_t ldc) {
  if (j0 % panel_cols != 0 || j0 < 0 || j0 + w > n || !sgemm_avx512_takes(false, false, m, w, k)) return false;
  from_packed(false, m, w, k, alpha, a, lda, panels, n, j0, beta, c, ldc, {});
  return true;
}

bool sgemm_avx512_columns(bool trans_a, std::int64_t m, float alpha, const float* a, std::int64_t lda,
                          const sgemm_packed_b& b, std::int64_t j0, std::int64_t w, float beta, float* c,
                          std::int64_t ldc, const gemm_epilogue& epilogue) {
  if (j0 < 0 || w < 0 || j0 > b.n_ - w) return false;
  if (!b.panels_) {
    return sgemm_avx512(trans_a, b.trans_, m, w, b.k_, alpha, a, lda, b.b_ + (b.trans_ ? j0 * b.ldb_ : j0), b.ldb_,
                        beta, c, ldc, epilogue);
  }
  if (j0 % panel_cols != 0 || !sgemm_avx512_takes(trans_a, b.trans_, m, w, b.k_)) return false;
  from_packed(trans_a, m, w, b.k_, alpha, a, lda, b.panels_, b.n_, j0, beta, c, ldc, epilogue);
  return true;
}

bool sgemm_avx512(bool trans_a, std::int64_t m, float alpha, const float* a, std::int64_t lda, const sgemm_packed_b& b,
                  float beta, float* c, std::int64_t ldc, const gemm_epilogue& epilogue) {
  return sgemm_avx512_columns(trans_a, m, alpha, a, lda, b, 0, b.count(), beta, c, ldc, epilogue);
}

#endif

}  // namespace loom::ops
