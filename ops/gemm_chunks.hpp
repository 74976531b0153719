// Products split into row chunks of a fixed size (so the split, and the result, do not depend
// on the thread count), each chunk one BLAS call: matmul's and the fused linear's. Private.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "bgemm.hpp"
#include "blas.hpp"
#include "packing_pool.hpp"  // split_sum's scratch
#include "loom/core/kernel.hpp"
#include "loom/core/parallel.hpp"
#include "sgemm_avx512.hpp"

namespace loom::ops::gemm_chunks {

// Pointer to row r of op(X), X stored with leading dimension ld.
template <class P>
P row_of_op(P x, bool trans, std::int64_t ld, std::int64_t r) {
  return trans ? x + r : x + r * ld;
}

// Rows per work item: at least 256 and about 2^22 multiply-adds, a multiple of 16. Each call
// packs its other operand again, so small row chunks pay for that packing over and over: on
// this machine (1 thread, OpenBLAS's AVX-512 sgemm) a [1024, 1024]·[1024, 256] product ran at
// 68 GFLOP/s in 64-row calls, 89 in 256-row calls and 97 in one call. 256 rows still split
// the large products of a training step for two or more threads. Depends on the shape only.
inline std::int64_t row_grain(std::int64_t n, std::int64_t k) {
  const std::int64_t per_row = std::max<std::int64_t>(1, n * k);
  const std::int64_t rows = std::max<std::int64_t>(256, (std::int64_t{1} << 22) / per_row);
  return (rows + 15) / 16 * 16;
}

// Rows per work item of a product whose other operand is packed once for all of them
// (bgemm_packed_b, sgemm_packed_b): about 2^21 multiply-adds, a multiple of 8 (the bf16 kernel's
// tile), at least min_rows. Finer than row_grain, whose chunks each pack that operand again: here
// each row of op(X) is packed once however the rows are split, so small items cost little, and
// they spread a product evenly over the threads (3 chunks of 256 rows leave one of 2 threads idle
// a third of the product). The bits do not depend on the split (bgemm.hpp, sgemm_avx512.hpp).
// - bf16: at least 16 rows. On the small training step (bench_vs_torch small_train_bf16, AMD
//   EPYC Zen 4) items of 2^19 to 2^24 multiply-adds ran alike within the run-to-run noise, at 1
//   and at 2 threads.
// - float (packed_float_rows): at least 96 rows (whole tiles of the AVX2 kernel's 3 rows and the
//   AVX-512 kernel's 8 or 12). Each item passes every packed panel over its rows, and the panels
//   of a large op(B) come from the outer caches: 16-row items read them for 5 AVX2 tiles each.
//   One process alternating the splits, 1 thread, GFLOP/s medians of 23 rounds [AMD EPYC, family
//   25 model 1, Zen 3]: [1024, 256] · [256, 1024] 51.1 (16 rows) → 55.3 (96) → 51.8 (256);
//   [1024, 1024] · [1024, 256] 69.8 → 74.6 → 72.2; [1024, 256] · [256, 768] 50.1 → 53.4 → 50.6.
//   On AVX-512 [AMD EPYC, family 25 model 17, Zen 4], the small training step at 1 thread in one
//   process switching the least rows every two steps (12 rounds, medians of per-round ratios
//   to 96): 192 rows 1.009×, 256 rows 1.003×, 48 rows 1.028× — 96 kept.
inline std::int64_t packed_row_grain(std::int64_t n, std::int64_t k, std::int64_t min_rows = 16) {
  const std::int64_t per_row = std::max<std::int64_t>(1, n * k);
  return std::max<std::int64_t>(min_rows, (std::int64_t{1} << 21) / per_row / 8 * 8);
}

/// packed_row_grain's least rows for float products over sgemm_packed_b.
constexpr std::int64_t packed_float_rows = 96;

// item(b, r0, r1) for rows [r0, r1) of each of `batch` products [rows, n] · [n, k]ᵀ-sized (k
// the sum's length), in items of packed_row_grain(n, k, min_rows) rows, over the threads: the
// loop of every product whose other operand is packed once (bgemm_packed_b, sgemm_packed_b).
template <class Item>
void for_packed_rows(std::int64_t batch, std::int64_t rows, std::int64_t n, std::int64_t k, Item&& item,
                     std::int64_t min_rows = 16) {
  const std::int64_t g = packed_row_grain(n, k, min_rows);
  const std::int64_t items = (rows + g - 1) / g;
  for_chunks(batch * items, 1, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t r0 = (i % items) * g;
      item(i / items, r0, std::min(rows, r0 + g));
    }
  });
}

// Columns per parallel block of a product that the row chunks leave in one piece (the weight
// gradients of a small model: [64, 64] summed over 512 rows), so that more than one thread
// can take part: multiples of 32 (loom's GEMM panel), about 2^20 multiply-adds each, n (one
// block) for products loom's own GEMM does not take (the BLAS would repack op(X) per block).
// Every element of loom's GEMM is computed alike in any column block (sgemm_avx512.hpp), so
// the split changes no bits. Depends on the shape only.
template <class T>
std::int64_t column_block(bool tx, bool ty, std::int64_t rows, std::int64_t n, std::int64_t k, std::int64_t batch = 1,
                          double macs_per_block = 1 << 20) {
  if (!std::is_same_v<T, float> || !sgemm_avx512_takes(tx, ty, rows, n, k)) return n;
  const double macs =
      static_cast<double>(rows) * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(batch);
  const std::int64_t blocks =
      std::min<std::int64_t>(n / 32, static_cast<std::int64_t>(std::min(macs / macs_per_block, 1e6)));
  if (blocks < 2) return n;
  return ((n + blocks - 1) / blocks + 31) / 32 * 32;
}

// Products of one row item that loom's kernel does not take go to the BLAS, one call on one
// thread unless split here (shape-only splits, so the same bits for any thread count):
// - over columns, in blocks of blas_block (blas_column_block): each element is one BLAS
//   element whichever block holds it, and op(X) is packed once per 2048 columns (a language
//   model's logits on a few hundred rows: [256, 256] · [256, 32000]);
// - over a long sum, when the columns make one block (split_sum): blocks of at least blas_block
//   of k, at most max_sum_blocks of them, partial products in parallel, added in block order
//   (the gradient of those rows: [256, 32000] · [32000, 256]). Changes the bits from one call's.
// Only products of at least 2^22 multiply-adds: below that one thread's call is short anyway.
// At V = 32000 and 2 threads a head's 256-row products made in one call each ran 1.5× slower
// than when split (bench_lm_head, AMD EPYC family 25 model 1, Zen 3).
constexpr std::int64_t blas_block = 2048;
constexpr std::int64_t max_sum_blocks = 16;
constexpr double blas_split_macs = 1 << 22;

// Whether a product of one row item goes to the BLAS (not loom's kernel) and is worth splitting.
template <class T>
bool blas_splits(bool tx, bool ty, std::int64_t rows, std::int64_t n, std::int64_t k) {
  if (std::is_same_v<T, float> && sgemm_avx512_takes(tx, ty, rows, n, k)) return false;
  return static_cast<double>(rows) * static_cast<double>(n) * static_cast<double>(k) >= blas_split_macs;
}

// Columns per block of such a product: blas_block when there are more, else n.
template <class T>
std::int64_t blas_column_block(bool tx, bool ty, std::int64_t rows, std::int64_t n, std::int64_t k) {
  return n > blas_block && blas_splits<T>(tx, ty, rows, n, k) ? blas_block : n;
}

// Length of each block of the sum in split_sum (k itself: no split).
template <class T>
std::int64_t blas_sum_block(bool tx, bool ty, std::int64_t rows, std::int64_t n, std::int64_t k) {
  if (n > blas_block || k <= blas_block || !blas_splits<T>(tx, ty, rows, n, k)) return k;
  return std::max(blas_block, (k + max_sum_blocks - 1) / max_sum_blocks);
}

// op(X) · op(Y) for the columns [j0, j0 + w) of C: op(Y)'s columns start at y + j0 (Y is
// [k, n]) or at row j0 of Y (transposed: Y is [n, k]).
template <class P>
P columns_of_op(P y, bool trans, std::int64_t ld, std::int64_t j0) {
  return trans ? y + j0 * ld : y + j0;
}

// op(B) [k, n] (trans_b, b, ldb as sgemm_avx512 takes them) packed as loom's float kernel reads
// it, kept in `slot` from one forward() to the next (op_args::kept, exec_options::pack_weights):
// made at the first product of two rows or more, again if the slot holds another operand's. Null
// without a slot and for one row (a GEMV, which reads op(B) as it is: nothing to pack for).
inline const sgemm_packed_b* kept_packing(kept_weight* slot, std::int64_t rows, bool trans_b, std::int64_t n,
                                          std::int64_t k, const float* b, std::int64_t ldb) {
  if (!slot || rows < 2) return nullptr;
  auto* p = static_cast<const sgemm_packed_b*>(slot->made.get());
  // made for this operand (a parameter's address is fixed while the store's layout is; checked all the same)
  if (!p || p->operand() != b || p->trans() != trans_b || p->count() != n || p->k() != k || p->ld() != ldb) {
    auto made = std::make_shared<sgemm_packed_b>(trans_b, n, k, b, ldb);
    p = made.get();
    slot->made = std::move(made);
  }
  return p;
}

// C (rows x n) = beta · C + Σ_b op(X_b) · op(Y_b) over the whole of C, parallel over column
// blocks (column_block), the batch summed in order in each: the one-piece case of both
// functions below (batched_gemm has batch 1 there). With `kept` (op(Y) packed, batch 1), the
// blocks of two rows or more read it: the same bits.
template <class T>
void in_column_blocks(bool tx, bool ty, std::int64_t batch, std::int64_t rows, std::int64_t n, std::int64_t k,
                      const T* x, std::int64_t ldx, std::int64_t sx, const T* y, std::int64_t ldy, std::int64_t sy,
                      T* c, T beta, bool bf16 = false, const sgemm_packed_b* kept = nullptr) {
  std::int64_t cols = column_block<T>(tx, ty, rows, n, k, batch);
  if (cols == n) cols = blas_column_block<T>(tx, ty, rows, n, k);
  if constexpr (std::is_same_v<T, float>)
    if (bf16 && batch == 1 && cols < n && k >= 1) {  // op(X) rounded and packed once for every block
      const bgemm_packed_a xp(tx, rows, k, x, ldx);
      for_chunks((n + cols - 1) / cols, 1, [&](std::int64_t c0, std::int64_t c1) {
        for (std::int64_t cb = c0; cb < c1; ++cb) {
          const std::int64_t j0 = cb * cols;
          bgemm(xp, ty, std::min(cols, n - j0), 1.f, columns_of_op(y, ty, ldy, j0), ldy, beta, c + j0, n);
        }
      });
      return;
    }
  if constexpr (std::is_same_v<T, float>)
    if (tx && batch == 1 && !bf16 && !kept && n > 3 * cols && sgemm_avx512_takes(tx, ty, rows, n, k)) {
      // four blocks or more over a transposed op(X), copied once for all of them (sgemm_packed_a):
      // in place, each block read all of it, one piece from each of k lines ldx floats apart
      if (const sgemm_packed_a xp(tx, rows, k, x, ldx); xp.packed()) {
        for_chunks((n + cols - 1) / cols, 1, [&](std::int64_t c0, std::int64_t c1) {
          for (std::int64_t cb = c0; cb < c1; ++cb) {
            const std::int64_t j0 = cb * cols, w = std::min(cols, n - j0);
            if (!sgemm_avx512(xp, ty, w, 1.f, columns_of_op(y, ty, ldy, j0), ldy, beta, c + j0, n))  // w < 16
              gemm<T>(tx, ty, rows, w, k, T(1), x, ldx, columns_of_op(y, ty, ldy, j0), ldy, beta, c + j0, n);
          }
        });
        return;
      }
    }
  for_chunks((n + cols - 1) / cols, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t cb = c0; cb < c1; ++cb) {
      const std::int64_t j0 = cb * cols, w = std::min(cols, n - j0);
      if constexpr (std::is_same_v<T, float>)
        if (kept && batch == 1 && !bf16) {
          gemm(tx, rows, 1.f, x, ldx, *kept, beta, c + j0, n, j0, w);
          continue;
        }
      for (std::int64_t b = 0; b < batch; ++b)
        gemm<T>(tx, ty, rows, w, k, T(1), x + b * sx, ldx, columns_of_op(y + b * sy, ty, ldy, j0), ldy,
                b == 0 ? beta : T(1), c + j0, n, bf16);
    }
  });
}

// C (rows × n) = beta · C + op(X) · op(Y) with the sum over k in blocks of `len`: the blocks'
// products in parallel into a scratch buffer (the packing pool's, in float), then added in block
// order, element by element.
template <class T>
void split_sum(bool tx, bool ty, std::int64_t rows, std::int64_t n, std::int64_t k, std::int64_t len, const T* x,
               std::int64_t ldx, const T* y, std::int64_t ldy, T* c, T beta, bool bf16) {
  const std::int64_t blocks = (k + len - 1) / len, size = rows * n;
  std::conditional_t<std::is_same_v<T, float>, packing_buffer<float>, std::vector<T>> buffer;
  if constexpr (std::is_same_v<T, float>) buffer = take_packing_buffer<float>();
  T* const partial = line_aligned(buffer, blocks * size);
  for_chunks(blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t k0 = b * len;
      gemm<T>(tx, ty, rows, n, std::min(len, k - k0), T(1), tx ? x + k0 * ldx : x + k0, ldx,
              ty ? y + k0 : y + k0 * ldy, ldy, T(0), partial + b * size, n, bf16);
    }
  });
  for_chunks(size, 1 << 13, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      T sum = partial[i];
      for (std::int64_t b = 1; b < blocks; ++b) sum += partial[b * size + i];
      c[i] = beta == T(0) ? sum : beta * c[i] + sum;
    }
  });
  if constexpr (std::is_same_v<T, float>) give_packing_buffer(std::move(buffer));
}

// C (rows x n, in batches) = op(X) · op(Y) (+ C when accumulate), parallel over
// (batch, row chunk); a single chunk, in column blocks (column_block). `kept`: op(Y), shared by
// the batch (sy 0), as kept_packing made it; the products then read it instead of packing op(Y).
template <class T>
void batched_gemm(bool tx, bool ty, std::int64_t batch, std::int64_t rows, std::int64_t n, std::int64_t k,
                  const T* x, std::int64_t ldx, std::int64_t sx, const T* y, std::int64_t ldy, std::int64_t sy, T* c,
                  std::int64_t sc, T beta, bool bf16 = false, const sgemm_packed_b* kept = nullptr) {
  if constexpr (std::is_same_v<T, float>) {
    const std::int64_t g = packed_row_grain(n, k);
    if (bf16 && (batch == 1 || sy == 0) && k >= 1 && batch * ((rows + g - 1) / g) > 1) {  // op(Y) packed once
      const bgemm_packed_b yp(ty, n, k, y, ldy);
      for_packed_rows(batch, rows, n, k, [&](std::int64_t b, std::int64_t r0, std::int64_t r1) {
        bgemm(tx, r1 - r0, 1.f, row_of_op(x + b * sx, tx, ldx, r0), ldx, yp, beta, c + b * sc + r0 * n, n);
      });
      return;
    }
  }
  std::int64_t grain = row_grain(n, k);
  std::int64_t chunks = (rows + grain - 1) / grain;
  if constexpr (std::is_same_v<T, float>) {
    if (!bf16 && (batch == 1 || sy == 0) && batch * chunks > 1 && sgemm_avx512_takes(tx, ty, rows, n, k)) {
      std::optional<sgemm_packed_b> made;  // op(Y) packed once, when loom's kernel packs it
      const sgemm_packed_b& yp = kept ? *kept : made.emplace(ty, n, k, y, ldy);
      if (yp.packed()) {
        for_packed_rows(batch, rows, n, k, [&](std::int64_t b, std::int64_t r0, std::int64_t r1) {
          gemm(tx, r1 - r0, 1.f, row_of_op(x + b * sx, tx, ldx, r0), ldx, yp, beta, c + b * sc + r0 * n, n);
        }, packed_float_rows);
        return;
      }
    }
  }
  if (batch * chunks == 1) {
    if (const std::int64_t len = blas_sum_block<T>(tx, ty, rows, n, k); len < k && !kept)
      return split_sum(tx, ty, rows, n, k, len, x, ldx, y, ldy, c, beta, bf16);
    return in_column_blocks(tx, ty, 1, rows, n, k, x, ldx, sx, y, ldy, sy, c, beta, bf16, kept);
  }
  for_chunks(batch * chunks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t item = b0; item < b1; ++item) {
      std::int64_t b = item / chunks, r0 = (item % chunks) * grain, r1 = std::min(rows, r0 + grain);
      gemm<T>(tx, ty, r1 - r0, n, k, T(1), row_of_op(x + b * sx, tx, ldx, r0), ldx, y + b * sy, ldy, beta,
              c + b * sc + r0 * n, n, bf16);
    }
  });
}

// C (rows x n) = beta · C + Σ_b op(X_b) · op(Y_b): a gradient of an operand shared across the
// batch, parallel over row chunks of C, the batch summed in order inside each chunk.
template <class T>
void summed_gemm(bool tx, bool ty, std::int64_t batch, std::int64_t rows, std::int64_t n, std::int64_t k,
                 const T* x, std::int64_t ldx, std::int64_t sx, const T* y, std::int64_t ldy, std::int64_t sy, T* c,
                 T beta, bool bf16 = false) {
  if (batch == 0) {  // nothing to sum: C = beta · C
    for (std::int64_t e = 0; e < rows * n; ++e) c[e] = beta == T(0) ? T(0) : c[e];
    return;
  }
  // one product summed over nothing else is batched_gemm's: in bf16, op(Y) packed once
  if (bf16 && batch == 1) return batched_gemm<T>(tx, ty, 1, rows, n, k, x, ldx, 0, y, ldy, 0, c, 0, beta, true);
  std::int64_t grain = row_grain(n, k * batch);
  std::int64_t chunks = (rows + grain - 1) / grain;
  if (chunks == 1) return in_column_blocks(tx, ty, batch, rows, n, k, x, ldx, sx, y, ldy, sy, c, beta, bf16);
  for_chunks(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t ch = c0; ch < c1; ++ch) {
      std::int64_t r0 = ch * grain, r1 = std::min(rows, r0 + grain);
      for (std::int64_t b = 0; b < batch; ++b)
        gemm<T>(tx, ty, r1 - r0, n, k, T(1), row_of_op(x + b * sx, tx, ldx, r0), ldx, y + b * sy, ldy,
                b == 0 ? beta : T(1), c + r0 * n, n, bf16);
    }
  });
}

}  // namespace loom::ops::gemm_chunks
