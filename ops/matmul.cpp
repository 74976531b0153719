// matmul kernels. See include/loom/ops/matmul.hpp for the math.
//
// a: [..., M, K] (TransA: [..., K, M]), b: [..., K, N] (TransB: [..., N, K]) -> c: [..., M, N].
// Work is split into (batch, row-chunk) items of fixed size, so the split — and the result —
// does not depend on the thread count. Each item is one serial BLAS call.
#include <algorithm>

#include "blas.hpp"
#include "gemm_chunks.hpp"
#include "kernel.hpp"
#include "loom/ops/matmul.hpp"
#include "parallel.hpp"

namespace loom::ops {
namespace {

struct mm_dims {
  bool ta, tb;
  std::int64_t m, n, k, batch;
  bool a_shared, b_shared;  // operand has no batch dims and is reused for every batch entry
  std::int64_t lda, ldb;
  std::int64_t stride_a, stride_b, stride_c;  // between the matrices of the gradients (contiguous) and of c
  std::int64_t read_a, read_b;                // between the matrices of the values a and b (maybe spaced)
  bool a_flat;                                // a's batch and rows form one [batch·M, K] matrix
};

template <class T>
mm_dims dims_of(const op_args<T>& a) {
  mm_dims d{};
  const auto attrs = a.template attrs<matmul_attrs>();
  d.ta = attrs.trans_a;
  d.tb = attrs.trans_b;
  const dims_t& da = a.in_dims[0];
  const dims_t& db = a.in_dims[1];
  d.m = d.ta ? da[-1] : da[-2];
  d.k = d.ta ? da[-2] : da[-1];
  d.n = d.tb ? db[-2] : db[-1];
  d.a_shared = da.rank == 2 && db.rank > 2;
  d.b_shared = db.rank == 2 && da.rank > 2;
  // the batch of the operand that has one (both have the same when both do); never max(): a
  // shared operand's 1 would turn an empty batch into one
  d.batch = da.rank > 2 ? da.prod(0, da.rank - 2) : db.prod(0, db.rank - 2);
  d.lda = d.ta ? d.m : d.k;
  d.ldb = d.tb ? d.k : d.n;
  d.stride_a = d.a_shared ? 0 : d.m * d.k;
  d.stride_b = d.b_shared ? 0 : d.k * d.n;
  d.stride_c = d.m * d.n;
  d.read_a = d.a_shared ? 0 : a.mat_stride(0);
  d.read_b = d.b_shared ? 0 : a.mat_stride(1);
  d.a_flat = d.b_shared && !d.ta && d.read_a == d.stride_a;
  return d;
}

}  // namespace
using namespace gemm_chunks;

template <class T>
void matmul_kernel<T>::forward(const op_args<T>& a) {
  mm_dims d = dims_of(a);
  const T* A = a.input(0);
  const T* B = a.input(1);
  if (d.a_flat) {
    // a's batch and rows flatten into one [batch·M, K] matrix: a single GEMM against b.
    batched_gemm<T>(false, d.tb, 1, d.batch * d.m, d.n, d.k, A, d.lda, 0, B, d.ldb, 0, a.out, 0, T(0));
  } else {
    batched_gemm<T>(d.ta, d.tb, d.batch, d.m, d.n, d.k, A, d.lda, d.read_a, B, d.ldb, d.read_b, a.out,
                    d.stride_c, T(0));
  }
}

template <class T>
void matmul_kernel<T>::backward(const op_args<T>& a) {
  mm_dims d = dims_of(a);
  const T* A = a.input(0);
  const T* B = a.input(1);
  const T* dC = a.dout;
  if (T* dA = a.grad(0)) {
    const T beta = a.fresh(0) ? T(0) : T(1);  // the first contribution overwrites
    // !TransA: dA[M,K] += dC[M,N] · op(B)ᵀ      TransA: dA[K,M] += op(B)[K,N] · dCᵀ
    if (!d.ta) {
      if (d.a_shared)
        summed_gemm<T>(false, !d.tb, d.batch, d.m, d.k, d.n, dC, d.n, d.stride_c, B, d.ldb, d.read_b, dA, beta);
      else if (d.b_shared)
        batched_gemm<T>(false, !d.tb, 1, d.batch * d.m, d.k, d.n, dC, d.n, 0, B, d.ldb, 0, dA, 0, beta);
      else
        batched_gemm<T>(false, !d.tb, d.batch, d.m, d.k, d.n, dC, d.n, d.stride_c, B, d.ldb, d.read_b, dA,
                        d.stride_a, beta);
    } else {
      if (d.a_shared)
        summed_gemm<T>(d.tb, true, d.batch, d.k, d.m, d.n, B, d.ldb, d.read_b, dC, d.n, d.stride_c, dA, beta);
      else
        batched_gemm<T>(d.tb, true, d.batch, d.k, d.m, d.n, B, d.ldb, d.read_b, dC, d.n, d.stride_c, dA,
                        d.stride_a, beta);
    }
  }
  if (T* dB = a.grad(1)) {
    const T beta = a.fresh(1) ? T(0) : T(1);
    // !TransB: dB[K,N] += op(A)ᵀ[K,M] · dC[M,N]      TransB: dB[N,K] += dCᵀ[N,M] · op(A)[M,K]
    if (!d.tb) {
      if (d.a_flat)  // a flattens to [batch·M, K]: one reduction over batch·M
        summed_gemm<T>(true, false, 1, d.k, d.n, d.batch * d.m, A, d.lda, 0, dC, d.n, 0, dB, beta);
      else if (d.b_shared)
        summed_gemm<T>(!d.ta, false, d.batch, d.k, d.n, d.m, A, d.lda, d.read_a, dC, d.n, d.stride_c, dB, beta);
      else
        batched_gemm<T>(!d.ta, false, d.batch, d.k, d.n, d.m, A, d.lda, d.read_a, dC, d.n, d.stride_c, dB,
                        d.stride_b, beta);
    } else {
      if (d.a_flat)
        summed_gemm<T>(true, false, 1, d.n, d.k, d.batch * d.m, dC, d.n, 0, A, d.lda, 0, dB, beta);
      else if (d.b_shared)
        summed_gemm<T>(true, d.ta, d.batch, d.n, d.k, d.m, dC, d.n, d.stride_c, A, d.lda, d.read_a, dB, beta);
      else
        batched_gemm<T>(true, d.ta, d.batch, d.n, d.k, d.m, dC, d.n, d.stride_c, A, d.lda, d.read_a, dB,
                        d.stride_b, beta);
    }
  }
}

template struct matmul_kernel<float>;
template struct matmul_kernel<double>;

}  // namespace loom::ops
