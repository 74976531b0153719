// Products split into row chunks of a fixed size (so the split, and the result, do not depend
// on the thread count), each chunk one BLAS call: matmul's and the fused linear's. Private.
#pragma once

#include <algorithm>
#include <cstdint>

#include "blas.hpp"
#include "parallel.hpp"

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

// C (rows x n, in batches) = op(X) · op(Y) (+ C when accumulate), parallel over
// (batch, row chunk). X, Y, C advance by their strides per batch entry.
template <class T>
void batched_gemm(bool tx, bool ty, std::int64_t batch, std::int64_t rows, std::int64_t n, std::int64_t k,
                  const T* x, std::int64_t ldx, std::int64_t sx, const T* y, std::int64_t ldy, std::int64_t sy, T* c,
                  std::int64_t sc, T beta) {
  std::int64_t grain = row_grain(n, k);
  std::int64_t chunks = (rows + grain - 1) / grain;
  for_chunks(batch * chunks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t item = b0; item < b1; ++item) {
      std::int64_t b = item / chunks, r0 = (item % chunks) * grain, r1 = std::min(rows, r0 + grain);
      gemm<T>(tx, ty, r1 - r0, n, k, T(1), row_of_op(x + b * sx, tx, ldx, r0), ldx, y + b * sy, ldy, beta,
              c + b * sc + r0 * n, n);
    }
  });
}

// C (rows x n) = beta · C + Σ_b op(X_b) · op(Y_b): a gradient of an operand shared across the
// batch, parallel over row chunks of C, the batch summed in order inside each chunk.
template <class T>
void summed_gemm(bool tx, bool ty, std::int64_t batch, std::int64_t rows, std::int64_t n, std::int64_t k,
                 const T* x, std::int64_t ldx, std::int64_t sx, const T* y, std::int64_t ldy, std::int64_t sy, T* c,
                 T beta) {
  if (batch == 0) {  // nothing to sum: C = beta · C
    for (std::int64_t e = 0; e < rows * n; ++e) c[e] = beta == T(0) ? T(0) : c[e];
    return;
  }
  std::int64_t grain = row_grain(n, k * batch);
  std::int64_t chunks = (rows + grain - 1) / grain;
  for_chunks(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t ch = c0; ch < c1; ++ch) {
      std::int64_t r0 = ch * grain, r1 = std::min(rows, r0 + grain);
      for (std::int64_t b = 0; b < batch; ++b)
        gemm<T>(tx, ty, r1 - r0, n, k, T(1), row_of_op(x + b * sx, tx, ldx, r0), ldx, y + b * sy, ldy,
                b == 0 ? beta : T(1), c + r0 * n, n);
    }
  });
}

}  // namespace loom::ops::gemm_chunks
