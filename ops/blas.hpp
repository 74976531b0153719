// GEMM through a BLAS: OpenBLAS's pthread build, one thread per call (openblas_set_num_threads(1)
// in ops/blas.cpp; cmake/LoomOpenBLAS.cmake says why that build), called from many TBB tasks at
// once — TBB owns the threads. Private to the library.
#pragma once

#include <cstdint>

namespace loom::ops {

/// C[M,N] = alpha · op(A) · op(B) + beta · C, row-major, op(X) = Xᵀ when trans_x. With bf16
/// (float only; exec_options::precision): op(A) and op(B) rounded to bf16 and multiplied with
/// float accumulation (ops/bgemm.hpp: the same bits on every CPU, fast where it has
/// AVX512_BF16).
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc, bool bf16 = false);

class sgemm_packed_b;

/// gemm<float>(trans_a, b's trans_b, m, w, b.k(), alpha, a, lda, b's operand from column j0, ldb,
/// beta, c, ldc) for columns [j0, j0 + w) of op(B) (all of them by default; c addresses column j0
/// of C), the same bits, reading op(B) from its packed copy where loom's kernel computes the
/// product (two rows or more, j0 on a panel; one row is gemm's GEMV, as unpacked).
void gemm(bool trans_a, std::int64_t m, float alpha, const float* a, std::int64_t lda, const sgemm_packed_b& b,
          float beta, float* c, std::int64_t ldc, std::int64_t j0 = 0, std::int64_t w = -1);

}  // namespace loom::ops
