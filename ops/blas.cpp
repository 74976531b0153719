#include "blas.hpp"

#include <cblas.h>

namespace loom::ops {
namespace {
// An empty inner dimension: C = beta · C (BLAS rejects k = 0 with lda = 0).
template <class T>
void scale_c(std::int64_t m, std::int64_t n, T beta, T* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}
}  // namespace

template <>
void gemm<float>(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                 std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

template <>
void gemm<double>(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                  const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
                  std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace loom::ops
