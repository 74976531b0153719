// GEMM through OpenBLAS, one thread per call: TBB owns the parallelism.
//
// Why the pthread build and not the serial one: Debian's serial OpenBLAS (0.3.21) is not safe
// to call from several threads at once — measured here, 64 concurrent sgemm calls from TBB
// gave wrong results in up to 2% of calls — while the pthread build, limited to one thread,
// gave bit-exact results in every run at the same speed. A product with one row or one
// column goes to GEMV, which OpenBLAS runs 4–6× faster than a one-row GEMM (decoding).
#include "blas.hpp"

#include <cblas.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/core/errors.hpp"
#include "loom/core/tensor.hpp"  // aligned_allocator
#include "loom/core/parallel.hpp"
#include "gemm_chunks.hpp"  // columns_of_op
#include "bgemm.hpp"
#include "sgemm_avx512.hpp"

namespace loom::ops {
namespace {

// Every call runs on the calling thread (set before any call, whatever OPENBLAS_NUM_THREADS says).
const bool one_thread_per_call = [] {
  openblas_set_num_threads(1);
  return true;
}();

// An empty inner dimension: C = beta · C (BLAS rejects k = 0 with lda = 0).
template <class T>
void scale_c(std::int64_t m, std::int64_t n, T beta, T* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}

// Columns per parallel chunk of a one-row product with inner dimension k: about 2^16
// multiply-adds, a multiple of 16.
std::int64_t gemv_columns(std::int64_t k) { return (grain_for(k, std::int64_t{1} << 16) + 15) / 16 * 16; }

CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

void gemv(CBLAS_TRANSPOSE t, int m, int n, float alpha, const float* a, int lda, const float* x, int incx, float beta,
          float* y, int incy) {
  cblas_sgemv(CblasRowMajor, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
void gemv(CBLAS_TRANSPOSE t, int m, int n, double alpha, const double* a, int lda, const double* x, int incx,
          double beta, double* y, int incy) {
  cblas_dgemv(CblasRowMajor, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
void gemm_call(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
               float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_call(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
               double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc, bool bf16) {
  (void)one_thread_per_call;
  if (m == 0 || n == 0) return;
  // BLAS takes int sizes: refuse what would wrap (the executor's row chunks keep m small)
  constexpr std::int64_t int_max = std::numeric_limits<int>::max();
  if (m > int_max || n > int_max || k > int_max || lda > int_max || ldb > int_max || ldc > int_max)
    throw shape_error("matmul: a product of [" + std::to_string(m) + ", " + std::to_string(k) + "] by [" +
                      std::to_string(k) + ", " + std::to_string(n) + "] has a dim or row length beyond BLAS's " +
                      "limit of 2^31 - 1");
  if (k == 0) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    if (bf16) {  // one kernel for every shape: its bits do not depend on which path a shape takes
      bgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  if (m == 1) {
    // c[1, N] = op(a)[1, K] · op(b)[K, N], i.e. cᵀ = op(b)ᵀ · op(a)ᵀ; op(a) is row 0 of a, or
    // column 0 of the stored [K, 1] matrix (stride lda) when transposed
    // column (= output) chunks in parallel: decoding reads each weight once per token, and one
    // core's share of the cache bandwidth bounds a GEMV, so a second core nearly halves it. The
    // chunks (about 2^16 multiply-adds, a multiple of 16 columns) depend on the sizes only.
    // x is gathered once, not once per chunk, when it is a column of a stored matrix (trans_a)
    // or does not start on a 64-byte boundary: loom's GEMV reads it once per row of b, and loads
    // that span two cache lines made the decoding step's GEMVs 96 µs instead of 81 [AMD EPYC]
    std::vector<T, aligned_allocator<T>> gathered;
    const T* x = a;
    if ((trans_a && lda != 1) || reinterpret_cast<std::uintptr_t>(a) % aligned_allocator<T>::alignment != 0) {
      gathered.resize(static_cast<std::size_t>(k));
      for (std::int64_t q = 0; q < k; ++q) gathered[static_cast<std::size_t>(q)] = a[trans_a ? q * lda : q];
      x = gathered.data();
    }
    for_chunks(n, gemv_columns(k), [&](std::int64_t j0, std::int64_t j1) {
      // loom's kernel when it can (float, AVX-512): no per-call setup; from the last-level cache
      // 83 vs OpenBLAS's 67 GB/s [AMD EPYC Zen 4, design-notes "BLAS"]
      if constexpr (std::is_same_v<T, float>)
        if (sgemv_avx512(trans_b, j1 - j0, k, alpha, x, trans_b ? b + j0 * ldb : b + j0, ldb, beta, c + j0)) return;
      const int cols = static_cast<int>(j1 - j0);
      if (trans_b)  // b is [N, K]
        gemv(CblasNoTrans, cols, K, alpha, b + j0 * ldb, static_cast<int>(ldb), x, 1, beta, c + j0, 1);
      else  // b is [K, N]
        gemv(CblasTrans, K, cols, alpha, b + j0, static_cast<int>(ldb), x, 1, beta, c + j0, 1);
    });
    return;
  }
  if (n == 1) {
    // c[M, 1] = op(a)[M, K] · op(b)[K, 1]; op(b) is column 0 of b (stride ldb), or row 0 when transposed
    const int inc_b = trans_b ? 1 : static_cast<int>(ldb);
    if (trans_a) gemv(CblasTrans, K, M, alpha, a, static_cast<int>(lda), b, inc_b, beta, c, static_cast<int>(ldc));
    else gemv(CblasNoTrans, M, K, alpha, a, static_cast<int>(lda), b, inc_b, beta, c, static_cast<int>(ldc));
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    if (sgemm_avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  gemm_call(trans_a, trans_b, M, N, K, alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
            static_cast<int>(ldc));
}

void gemm(bool trans_a, std::int64_t m, float alpha, const float* a, std::int64_t lda, const sgemm_packed_b& b,
          float beta, float* c, std::int64_t ldc, std::int64_t j0, std::int64_t w) {
  if (w < 0) w = b.count() - j0;
  if (m >= 2 && sgemm_avx512_columns(trans_a, m, alpha, a, lda, b, j0, w, beta, c, ldc)) return;
  gemm<float>(trans_a, b.trans(), m, w, b.k(), alpha, a, lda, gemm_chunks::columns_of_op(b.operand(), b.trans(), b.ld(), j0),
              b.ld(), beta, c, ldc);
}

template void gemm<float>(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t,
                          const float*, std::int64_t, float, float*, std::int64_t, bool);
template void gemm<double>(bool, bool, std::int64_t, std::int64_t, std::int64_t, double, const double*, std::int64_t,
                           const double*, std::int64_t, double, double*, std::int64_t, bool);

}  // namespace loom::ops
