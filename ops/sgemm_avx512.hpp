// loom's own single-precision GEMM for the products of loom's models (any N, K up to 4096),
// where OpenBLAS 0.3.21 repacks both operands at every call and, on CPUs newer than it, may not
// recognise the CPU at all (an Intel Xeon, family 6 model 207: its SSE3 kernel, 31 GFLOP/s at
// 1024³ against 138 with OPENBLAS_CORETYPE=SkylakeX): AVX-512 tiles where the CPU
// has AVX-512, AVX2 + FMA tiles (ops/sgemm_avx2.hpp) where it has only those, the same bits on
// both. The name is the AVX-512 kernel's, which came first. Private to ops/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "packing_pool.hpp"  // packing_buffer

namespace loom::ops {

/// Whether sgemm_avx512 computes products of this shape on this CPU (with AVX-512 or AVX2 + FMA).
bool sgemm_avx512_takes(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k);

/// The instructions and the tile of sgemm_avx512's products in this process: isa "avx512",
/// "avx2" (AVX2 + FMA, on CPUs without AVX-512: ops/sgemm_avx2.hpp) or "none" (neither: the BLAS
/// computes every product); rows × 32 columns of C in registers for products that read op(B) in
/// place (`rows`) and for those that read it from copied panels (`packed_rows`) — 8 or 12 each
/// with AVX-512, 3 with AVX2, 0 with none; how the rows were chosen: "table" (a CPU measured
/// beforehand: AMD family 25, Zen 4, takes 8 for both; Intel family 6 model 207, 12 in place and 8
/// on copied panels), "measured" (any other AVX-512 CPU: both tile heights timed for each kind on
/// the first product, the faster kept), "forced" (sgemm_avx512_force_tile_rows), "fixed" (AVX2) or
/// "none"; and `cpu`, the name of this CPU's entry in that table ("not in the table" for any other;
/// ops/sgemm_choice.cpp, which also sets how far op(B) is read in place). Every element of C has the same bits
/// under any of them: the choice is speed only. Asking makes the choice if no product has yet.
/// The environment variable LOOM_SGEMM_ISA=avx2 (or avx512) makes a process use that kernel
/// (std::invalid_argument from the first product when the value is neither or the CPU lacks it).
struct sgemm_tiling {
  const char* isa;
  int rows;
  int packed_rows;
  const char* how;
  const char* cpu;
};
sgemm_tiling sgemm_avx512_tiling();

/// Times both tile heights now, as a CPU not in the table does at its first product (a [96, 256]
/// · [256, 256] product, op(B) in place or, with packed_panels, copied into panels; a few
/// alternating rounds, about a millisecond), and returns the rows of the faster: 12 only when at
/// least 3% faster than 8. 0 without AVX-512. Changes no choice.
int sgemm_avx512_measure_tile_rows(bool packed_panels = false);

/// Which instructions sgemm_force_isa makes the products use: the CPU's choice, AVX2 + FMA, or
/// AVX-512.
enum class sgemm_isa { cpu, avx2, avx512 };

/// Makes the products that start from now on run on `isa` (for tests and benchmarks: the AVX2
/// kernel on an AVX-512 CPU; the same bits). std::invalid_argument when the CPU lacks it.
void sgemm_force_isa(sgemm_isa isa);

/// Makes the products that start from now on use tiles of `rows` rows (8 or 12; 0: back to the
/// CPU's choice) when they run on the AVX-512 kernel, for tests and benchmarks.
/// std::invalid_argument for any other value, and for 8 or 12 on a CPU without AVX-512.
void sgemm_avx512_force_tile_rows(int rows);

/// c[0, N) = alpha · x · op(B) + beta · c (c not read when beta is 0), x contiguous [K]:
/// the one-row product of decoding (a GEMV), when the CPU has AVX-512 (false, having touched
/// nothing, otherwise). trans_b: B is [N, K] and c[j] is x · row j of B, summed in 16 lanes over k
/// in order, then across the lanes by a fixed tree; else B is [K, N] and c[j] a chain of fused
/// multiply-adds over k in order. Each c[j] depends on x and its own row or column of B only (not
/// on N or on how the caller splits the columns). Any N ≥ 1, K ≥ 1.
bool sgemv_avx512(bool trans_b, std::int64_t n, std::int64_t k, float alpha, const float* x, const float* b,
                  std::int64_t ldb, float beta, float* c);

/// What sgemm_avx512 does to each element of C after alpha · sum + beta · c and before storing
/// it, while the tile is in registers (the fused linear's epilogue: no second pass over C):
/// y = max(0, y + bias[j]) (relu) or (y + bias[j]) + residual[i · ldr + j], in that order — the
/// same operations, so the same bits, as doing them over C afterwards. Null pointers: skipped.
struct gemm_epilogue {
  const float* bias = nullptr;
  bool relu = false;
  const float* residual = nullptr;
  std::int64_t ldr = 0;
  /// The epilogue of the block of C that starts at row i, column j.
  gemm_epilogue at(std::int64_t i, std::int64_t j) const {
    gemm_epilogue e = *this;
    if (bias) e.bias = bias + j;
    if (residual) e.residual = residual + i * ldr + j;
    return e;
  }
  /// Asks for the lines a tile's stores will read besides its sums, before they are needed: the
  /// residual (a layer's input) and, when beta ≠ 0, C (a gradient being added to), `Lines` lines
  /// of each of R rows from column 0, the last one the line of column last_col() — read from
  /// the outer caches at the end of the tile otherwise, a stall at every tile. R and Lines are
  /// fixed at compile time (GCC 12 deleted the prefetches of loops with run-time bounds), and
  /// last_col is called only when there is something to ask for.
  template <int R, int Lines, class F>
  [[gnu::always_inline]] void prefetch_reads(const float* c, std::int64_t ldc, float beta, F last_col) const {
    if (residual || beta != 0.f)
      for (int r = 0; r < R; ++r)
        for (int v = 0; v < Lines; ++v) {
          const auto j = std::min<decltype(last_col())>(16 * v, last_col());
          if (residual) __builtin_prefetch(residual + r * ldr + j, 0, 3);
          if (beta != 0.f) __builtin_prefetch(c + r * ldc + j, 0, 3);
        }
  }
};

/// C[M,N] = alpha · op(A) · op(B) + beta · C, then the epilogue (row-major; C is not read when beta is 0) when
/// the CPU has AVX-512 or AVX2 + FMA (sgemm_avx512_tiling) and the shape suits: N ≥ 16, 1 ≤ K ≤ 4096, not both operands
/// transposed. Returns false, having touched nothing, otherwise (the caller
/// then asks the BLAS).
///
/// Every element of C is one chain of fused multiply-adds over k in order, so its bits depend
/// only on its row of op(A), its column of op(B), alpha, beta and its old value: never on M,
/// on N, on how the caller splits the rows, the thread count, the tile's shape, or whether the CPU
/// runs the AVX-512 or the AVX2 kernel.
bool sgemm_avx512(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc,
                const gemm_epilogue& epilogue = {});

/// op(B) [K, N] of sgemm_avx512 packed once in the kernel's panels, for the row chunks of one
/// product that share it (a layer's weight, read by every chunk of its rows; the packing is split
/// over the threads). Packed when the kernel would pack it (transposed, N not a multiple of 16, a
/// row stride that is a multiple of 1024 floats, or K rows spanning more than 2^18 floats), takes
/// its shape and it is at most 2^20 floats; otherwise the products
/// read b in place, as sgemm_avx512 does. Read-only once made: products on other threads may
/// share it. Holds b's address, so b must outlive it, unchanged. Its buffer comes from a pool
/// (ops/packing_pool.hpp).
class sgemm_packed_b {
 public:
  /// op(B) as sgemm_avx512's trans_b, b, ldb take it: [K, n] (n, k ≥ 0).
  sgemm_packed_b(bool trans_b, std::int64_t n, std::int64_t k, const float* b, std::int64_t ldb);
  ~sgemm_packed_b();
  sgemm_packed_b(const sgemm_packed_b&) = delete;
  sgemm_packed_b& operator=(const sgemm_packed_b&) = delete;
  std::int64_t count() const { return n_; }
  std::int64_t k() const { return k_; }
  /// The operand as given: trans_b, b and ldb.
  bool trans() const { return trans_; }
  const float* operand() const { return b_; }
  std::int64_t ld() const { return ldb_; }
  /// Whether the operand was packed (else the products read it in place).
  bool packed() const { return panels_ != nullptr; }

 private:
  friend bool sgemm_avx512_columns(bool, std::int64_t, float, const float*, std::int64_t, const sgemm_packed_b&,
                                   std::int64_t, std::int64_t, float, float*, std::int64_t, const gemm_epilogue&);
  bool trans_;
  std::int64_t n_, k_;
  const float* b_;
  std::int64_t ldb_;
  packing_buffer<float> storage_;
  const float* panels_ = nullptr;
};

/// op(A) [M, K] of a transposed A (A [K, M], lda ≥ M) copied once into the strips sgemm_avx512's
/// AVX-512 tiles read (K pieces of a tile's rows in a run), for the column blocks of one product
/// that share it: a weight gradient dzᵀ · x split by columns, whose blocks each read all of dzᵀ,
/// one 32-byte piece from each of K lines lda floats apart. Copied when the products run on the
/// AVX-512 kernel, A is transposed and M · K ≤ 2^22 (the copy is split over the threads); otherwise
/// the products read a in place. Holds a's address: a must outlive it, unchanged. Read-only once
/// made. Its buffer comes from the packing pool.
class sgemm_packed_a {
 public:
  sgemm_packed_a(bool trans_a, std::int64_t m, std::int64_t k, const float* a, std::int64_t lda);
  ~sgemm_packed_a();
  sgemm_packed_a(const sgemm_packed_a&) = delete;
  sgemm_packed_a& operator=(const sgemm_packed_a&) = delete;
  /// Whether op(A) was copied (else the products read it in place).
  bool packed() const { return strips_ != nullptr; }

 private:
  friend bool sgemm_avx512(const sgemm_packed_a&, bool, std::int64_t, float, const float*, std::int64_t, float,
                           float*, std::int64_t);
  bool trans_;
  std::int64_t m_, k_;
  const float* a_;
  std::int64_t lda_;
  std::int64_t tile_ = 0;  // the strips' rows: the AVX-512 tile's when copied
  packing_buffer<float> storage_;
  const float* strips_ = nullptr;
};

/// sgemm_avx512(a's trans_a, trans_b, a's M, n, a's K, alpha, a's A, lda, b, ldb, beta, c, ldc):
/// the same bits, op(A) read from its copy (if the products still run on the tiles it was copied
/// for: sgemm_force_isa and sgemm_avx512_force_tile_rows may change them; else in place). False,
/// having touched nothing, when sgemm_avx512 would not take the shape.
bool sgemm_avx512(const sgemm_packed_a& a, bool trans_b, std::int64_t n, float alpha, const float* b, std::int64_t ldb,
                  float beta, float* c, std::int64_t ldc);

/// Floats that sgemm_pack_panels writes for an op(B) of n columns and k rows.
std::int64_t sgemm_panels_size(std::int64_t n, std::int64_t k);

/// op(B) [k, n] (as sgemm_avx512's trans_b, b, ldb take it) copied into `out` in the kernel's
/// panels (columns [j0, j0 + 32) at out + j0 · k, 32 or, for the last, 16 or 32 floats per row,
/// zero past n), on the calling thread: for products that read slices of one operand again and
/// again (fused attention's keys and values, once per entry instead of once per query block).
/// False, having written nothing, when sgemm_avx512_takes(false, trans_b, 1, n, k) is false.
bool sgemm_pack_panels(bool trans_b, std::int64_t n, std::int64_t k, const float* b, std::int64_t ldb, float* out);

/// C[m, w] = alpha · A · op(B)[:, j0 : j0 + w) + beta · C (A [m, k] row-major, C not read when beta
/// is 0), op(B) [k, n] packed by sgemm_pack_panels into `panels`: the same bits as sgemm_avx512(
/// false, trans_b, m, w, k, alpha, a, lda, op(B)'s columns from j0, ...). False, having touched
/// nothing, when j0 is not a multiple of 32, j0 + w > n, or sgemm_avx512_takes(false, false, m,
/// w, k) is false.
bool sgemm_avx512_panels(std::int64_t m, std::int64_t w, std::int64_t k, float alpha, const float* a, std::int64_t lda,
                         const float* panels, std::int64_t n, std::int64_t j0, float beta, float* c, std::int64_t ldc);

/// sgemm_avx512(trans_a, b's trans_b, m, b.count(), b.k(), alpha, a, lda, b's b, ldb, beta, c, ldc,
/// epilogue): the same bits, without packing op(B) again. False, having touched nothing, when
/// sgemm_avx512 would not take the shape.
bool sgemm_avx512(bool trans_a, std::int64_t m, float alpha, const float* a, std::int64_t lda, const sgemm_packed_b& b,
                  float beta, float* c, std::int64_t ldc, const gemm_epilogue& epilogue = {});

/// The same product for columns [j0, j0 + w) of op(B) only (j0 a multiple of 32 when b is
/// packed): c, ldc and the epilogue's bias and residual address column j0 of C, as
/// sgemm_avx512(trans_a, b's trans_b, m, w, b.k(), ..., op(B) from column j0, ...) takes them,
/// and give its bits. False, having touched nothing, for a range outside op(B), a j0 off the
/// panels, or a shape sgemm_avx512 would not take.
bool sgemm_avx512_columns(bool trans_a, std::int64_t m, float alpha, const float* a, std::int64_t lda,
                          const sgemm_packed_b& b, std::int64_t j0, std::int64_t w, float beta, float* c,
                          std::int64_t ldc, const gemm_epilogue& epilogue = {});

}  // namespace loom::ops
