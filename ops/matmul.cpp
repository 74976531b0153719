// matmul kernels. See include/loom/ops/matmul.hpp for the math.
//
// a: [..., M, K] (TransA: [..., K, M]), b: [..., K, N] (TransB: [..., N, K]) -> c: [..., M, N].
// Work is split into (batch, row-chunk) items of fixed size, so the split — and the result —
// does not depend on the thread count. Each item is one serial BLAS call. Batch dims that
// broadcast with size 1 inside (not just a missing operand's batch) take the general path:
// each output entry reads its operands' entries, and the gradient of an operand's entry sums
// over the output entries that read it, in order.
#include <algorithm>
#include <vector>

#include "blas.hpp"
#include "gemm_chunks.hpp"
#include "int8_gemm.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/matmul.hpp"
#include "loom/core/parallel.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
using namespace gemm_chunks;
namespace {

struct mm_dims {
  bool ta, tb;
  bool bf16;  // the products in bf16 with float accumulation (op_args::bf16)
  std::int64_t m, n, k, batch;
  bool a_shared, b_shared;  // operand has no batch dims and is reused for every batch entry
  std::int64_t lda, ldb;
  std::int64_t stride_a, stride_b, stride_c;  // between the matrices of the gradients (contiguous) and of c
  std::int64_t read_a, read_b;                // between the matrices of the values a and b (maybe spaced)
  bool a_flat;                                // a's batch and rows form one [batch·M, K] matrix
  bool general = false;                       // batch dims broadcast with size 1 inside (see above)
  std::vector<std::int64_t> entry_a, entry_b;  // general: each output entry's entries of a and b
  std::int64_t count_a = 1, count_b = 1;       // matrices in a and in b
};

// For each entry of the output's batch dims `out` (row-major), the entry of an operand whose
// batch dims `x` broadcast onto them.
std::vector<std::int64_t> entries_of(const dims_t& out, int out_batch, const dims_t& x, int x_batch) {
  std::int64_t n = 1;
  for (int k = 0; k < out_batch; ++k) n *= out.d[k];
  std::vector<std::int64_t> r(static_cast<std::size_t>(n));
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t rest = e, at = 0, stride = 1;
    for (int k = out_batch - 1; k >= 0; --k) {
      const std::int64_t i = rest % out.d[k];
      rest /= out.d[k];
      const int kx = k - (out_batch - x_batch);
      if (kx >= 0) {
        if (x.d[kx] != 1) at += i * stride;
        stride *= x.d[kx];
      }
    }
    r[static_cast<std::size_t>(e)] = at;
  }
  return r;
}

// Per entry of an operand (count of them), the output entries that read it, in order.
std::vector<std::vector<std::int64_t>> readers_of(const std::vector<std::int64_t>& entry, std::int64_t count) {
  std::vector<std::vector<std::int64_t>> r(static_cast<std::size_t>(count));
  for (std::size_t e = 0; e < entry.size(); ++e) r[static_cast<std::size_t>(entry[e])].push_back(static_cast<std::int64_t>(e));
  return r;
}

template <class T>
mm_dims dims_of(const op_args<T>& a) {
  mm_dims d{};
  d.bf16 = a.bf16;
  const auto attrs = a.template attrs<matmul_attrs>();
  d.ta = attrs.trans_a;
  d.tb = attrs.trans_b;
  const dims_t& da = a.in_dims[0];
  const dims_t& db = a.in_dims[1];
  d.m = d.ta ? da[-1] : da[-2];
  d.k = d.ta ? da[-2] : da[-1];
  d.n = d.tb ? db[-2] : db[-1];
  d.count_a = da.prod(0, da.rank - 2);
  d.count_b = db.prod(0, db.rank - 2);
  d.batch = a.out_dims.prod(0, a.out_dims.rank - 2);
  // one matrix reused for every entry (or for none: an empty batch, whose gradient is then zero)
  d.a_shared = d.count_a == 1 && d.batch != 1;
  d.b_shared = d.count_b == 1 && d.batch != 1;
  d.general = (d.count_a != 1 && d.count_a != d.batch) || (d.count_b != 1 && d.count_b != d.batch);
  if (d.general) {
    d.a_shared = d.b_shared = false;
    d.entry_a = entries_of(a.out_dims, a.out_dims.rank - 2, da, da.rank - 2);
    d.entry_b = entries_of(a.out_dims, a.out_dims.rank - 2, db, db.rank - 2);
  }
  d.lda = d.ta ? d.m : d.k;
  d.ldb = d.tb ? d.k : d.n;
  d.stride_a = d.a_shared ? 0 : d.m * d.k;
  d.stride_b = d.b_shared ? 0 : d.k * d.n;
  d.stride_c = d.m * d.n;
  d.read_a = d.a_shared ? 0 : a.mat_stride(0);
  d.read_b = d.b_shared ? 0 : a.mat_stride(1);
  d.a_flat = d.b_shared && !d.ta && d.read_a == d.stride_a;
  if (d.general) {
    d.read_a = a.mat_stride(0);
    d.read_b = a.mat_stride(1);
  }
  return d;
}

// The general path: C_g (rows x n, g = 0 .. groups) = beta · C_g + Σ_{e in readers[g]}
// op(X_e) · op(Y_e), X_e at x + x_off(e), Y_e at y + y_off(e); parallel over (g, row chunk),
// the entries of a group summed in order inside each item.
template <class T, class XOff, class YOff>
void grouped_gemm(bool tx, bool ty, const std::vector<std::vector<std::int64_t>>& readers, std::int64_t rows,
                  std::int64_t n, std::int64_t k, const T* x, std::int64_t ldx, XOff x_off, const T* y,
                  std::int64_t ldy, YOff y_off, T* c, std::int64_t sc, T beta, bool bf16) {
  const auto groups = static_cast<std::int64_t>(readers.size());
  std::int64_t grain = row_grain(n, k);
  std::int64_t chunks = (rows + grain - 1) / grain;
  for_chunks(groups * chunks, 1, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t item = i0; item < i1; ++item) {
      const std::int64_t g = item / chunks, r0 = (item % chunks) * grain, r1 = std::min(rows, r0 + grain);
      const auto& es = readers[static_cast<std::size_t>(g)];
      T* cg = c + g * sc + r0 * n;
      if (es.empty()) {  // read by no output entry (an empty batch): C = beta · C
        for (std::int64_t e = 0; e < (r1 - r0) * n; ++e) cg[e] = beta == T(0) ? T(0) : cg[e];
        continue;
      }
      for (std::size_t j = 0; j < es.size(); ++j)
        gemm<T>(tx, ty, r1 - r0, n, k, T(1), row_of_op(x + x_off(es[j]), tx, ldx, r0), ldx, y + y_off(es[j]), ldy,
                j == 0 ? beta : T(1), cg, n, bf16);
    }
  });
}

// The general path of matmul (batch dims broadcast with size 1 inside).
template <class T>
void general_forward(const mm_dims& d, const T* A, const T* B, T* C) {
  std::vector<std::vector<std::int64_t>> each(static_cast<std::size_t>(d.batch));
  for (std::int64_t e = 0; e < d.batch; ++e) each[static_cast<std::size_t>(e)] = {e};
  grouped_gemm<T>(d.ta, d.tb, each, d.m, d.n, d.k, A, d.lda, [&](std::int64_t e) { return d.entry_a[static_cast<std::size_t>(e)] * d.read_a; },
                  B, d.ldb, [&](std::int64_t e) { return d.entry_b[static_cast<std::size_t>(e)] * d.read_b; }, C,
                  d.stride_c, T(0), d.bf16);
}

template <class T>
void general_backward(const mm_dims& d, const op_args<T>& a) {
  const T* A = a.input(0);
  const T* B = a.input(1);
  const T* dC = a.dout;
  auto at_a = [&](std::int64_t e) { return d.entry_a[static_cast<std::size_t>(e)] * d.read_a; };
  auto at_b = [&](std::int64_t e) { return d.entry_b[static_cast<std::size_t>(e)] * d.read_b; };
  auto at_c = [&](std::int64_t e) { return e * d.stride_c; };
  if (T* dA = a.grad(0)) {
    const T beta = a.fresh(0) ? T(0) : T(1);
    const auto readers = readers_of(d.entry_a, d.count_a);
    if (!d.ta)  // dA[M,K] = Σ dC[M,N] · op(B)ᵀ
      grouped_gemm<T>(false, !d.tb, readers, d.m, d.k, d.n, dC, d.n, at_c, B, d.ldb, at_b, dA, d.m * d.k, beta, d.bf16);
    else  // dA[K,M] = Σ op(B)[K,N] · dCᵀ
      grouped_gemm<T>(d.tb, true, readers, d.k, d.m, d.n, B, d.ldb, at_b, dC, d.n, at_c, dA, d.m * d.k, beta, d.bf16);
  }
  if (T* dB = a.grad(1)) {
    const T beta = a.fresh(1) ? T(0) : T(1);
    const auto readers = readers_of(d.entry_b, d.count_b);
    if (!d.tb)  // dB[K,N] = Σ op(A)ᵀ[K,M] · dC[M,N]
      grouped_gemm<T>(!d.ta, false, readers, d.k, d.n, d.m, A, d.lda, at_a, dC, d.n, at_c, dB, d.k * d.n, beta, d.bf16);
    else  // dB[N,K] = Σ dCᵀ[N,M] · op(A)[M,K]
      grouped_gemm<T>(true, d.ta, readers, d.n, d.k, d.m, dC, d.n, at_c, A, d.lda, at_a, dB, d.k * d.n, beta, d.bf16);
  }
}

}  // namespace

namespace {

// x [.., M, K] · Wᵀ with W quantized to int8 (op_args::int8, a rank-2 parameter [N, K]): each
// matrix of x, or all of them as one when they lie contiguous, through int8_gemm.
void int8_forward(const op_args<float>& a) {
  const dims_t& dx = a.in_dims[0];
  const std::int64_t m = dx[-2], k = dx[-1], n = a.int8->rows, count = dx.prod(0, dx.rank - 2);
  const std::int64_t stride = a.mat_stride(0);
  if (stride == m * k) return int8_gemm(count * m, a.input(0), k, *a.int8, a.out, n);
  for (std::int64_t b = 0; b < count; ++b) int8_gemm(m, a.input(0) + b * stride, k, *a.int8, a.out + b * m * n, n);
}

}  // namespace

bool matmul_reads_int8_weight(const node_desc& node) {
  const auto t = load_attrs<matmul_attrs>(node);
  return !t.trans_a && t.trans_b;
}

template <class T>
void forward_kernel(matmul_def, const op_args<T>& a) {
  if constexpr (std::is_same_v<T, float>)
    if (a.int8) return int8_forward(a);
  mm_dims d = dims_of(a);
  const T* A = a.input(0);
  const T* B = a.input(1);
  if (d.general) {
    general_forward<T>(d, A, B, a.out);
    return;
  }
  // b may be a weight kept packed (exec_options::pack_weights), read by products of two rows or more
  const sgemm_packed_b* kept = nullptr;
  if constexpr (std::is_same_v<T, float>)
    if (!d.ta && !d.bf16 && (d.batch == 1 || d.b_shared))
      kept = kept_packing(a.kept, d.a_flat ? d.batch * d.m : d.m, d.tb, d.n, d.k, B, d.ldb);
  if (d.a_flat) {
    // a's batch and rows flatten into one [batch·M, K] matrix: a single GEMM against b
    batched_gemm<T>(false, d.tb, 1, d.batch * d.m, d.n, d.k, A, d.lda, 0, B, d.ldb, 0, a.out, 0, T(0), d.bf16, kept);
  } else {
    batched_gemm<T>(d.ta, d.tb, d.batch, d.m, d.n, d.k, A, d.lda, d.read_a, B, d.ldb, d.read_b, a.out,
                    d.stride_c, T(0), d.bf16, kept);
  }
}

template <class T>
void backward_kernel(matmul_def, const op_args<T>& a) {
  mm_dims d = dims_of(a);
  if (d.general) {
    general_backward<T>(d, a);
    return;
  }
  const T* A = a.input(0);
  const T* B = a.input(1);
  const T* dC = a.dout;
  if (T* dA = a.grad(0)) {
    const T beta = a.fresh(0) ? T(0) : T(1);  // the first contribution overwrites
    // !TransA: dA[M,K] += dC[M,N] · op(B)ᵀ      TransA: dA[K,M] += op(B)[K,N] · dCᵀ
    if (!d.ta) {
      if (d.a_shared)
        summed_gemm<T>(false, !d.tb, d.batch, d.m, d.k, d.n, dC, d.n, d.stride_c, B, d.ldb, d.read_b, dA, beta, d.bf16);
      else if (d.b_shared)
        batched_gemm<T>(false, !d.tb, 1, d.batch * d.m, d.k, d.n, dC, d.n, 0, B, d.ldb, 0, dA, 0, beta, d.bf16);
      else
        batched_gemm<T>(false, !d.tb, d.batch, d.m, d.k, d.n, dC, d.n, d.stride_c, B, d.ldb, d.read_b, dA,
                        d.stride_a, beta, d.bf16);
    } else {
      if (d.a_shared)
        summed_gemm<T>(d.tb, true, d.batch, d.k, d.m, d.n, B, d.ldb, d.read_b, dC, d.n, d.stride_c, dA, beta, d.bf16);
      else
        batched_gemm<T>(d.tb, true, d.batch, d.k, d.m, d.n, B, d.ldb, d.read_b, dC, d.n, d.stride_c, dA,
                        d.stride_a, beta, d.bf16);
    }
  }
  if (T* dB = a.grad(1)) {
    const T beta = a.fresh(1) ? T(0) : T(1);
    // !TransB: dB[K,N] += op(A)ᵀ[K,M] · dC[M,N]      TransB: dB[N,K] += dCᵀ[N,M] · op(A)[M,K]
    if (!d.tb) {
      if (d.a_flat)  // a flattens to [batch·M, K]: one reduction over batch·M
        summed_gemm<T>(true, false, 1, d.k, d.n, d.batch * d.m, A, d.lda, 0, dC, d.n, 0, dB, beta, d.bf16);
      else if (d.b_shared)
        summed_gemm<T>(!d.ta, false, d.batch, d.k, d.n, d.m, A, d.lda, d.read_a, dC, d.n, d.stride_c, dB, beta, d.bf16);
      else
        batched_gemm<T>(!d.ta, false, d.batch, d.k, d.n, d.m, A, d.lda, d.read_a, dC, d.n, d.stride_c, dB,
                        d.stride_b, beta, d.bf16);
    } else {
      if (d.a_flat)
        summed_gemm<T>(true, false, 1, d.n, d.k, d.batch * d.m, dC, d.n, 0, A, d.lda, 0, dB, beta, d.bf16);
      else if (d.b_shared)
        summed_gemm<T>(true, d.ta, d.batch, d.n, d.k, d.m, dC, d.n, d.stride_c, A, d.lda, d.read_a, dB, beta, d.bf16);
      else
        batched_gemm<T>(true, d.ta, d.batch, d.n, d.k, d.m, dC, d.n, d.stride_c, A, d.lda, d.read_a, dB,
                        d.stride_b, beta, d.bf16);
    }
  }
}

template struct compiled_kernels<matmul_def>;

}  // namespace loom
