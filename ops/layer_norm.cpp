// layer_norm kernels, over the last axis: x [.., D], gamma [D], beta [D] -> y [.., D].
//   forward:  μ = Σ x / D, σ² = Σ (x − μ)² / D, r = 1/√(σ² + ε), x̂ = (x − μ) r,
//             y = x̂ ⊙ gamma + beta   (statistics in sixteen-lane sums of T; μ and r saved per row
//             for backward, as PyTorch's layer norm saves them)
//   backward: g = dy ⊙ gamma;  dx += r (g − mean(g) − x̂ mean(g ⊙ x̂));
//             dgamma += Σ_rows dy ⊙ x̂;  dbeta += Σ_rows dy  — one pass over the rows with the
//             saved μ and r: each chunk of rows (bounds fixed by the sizes) sums its own in the
//             node's workspace, the chunks are then added in order, so sums do not depend on the
//             thread count
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/norm.hpp"
#include "loom/core/parallel.hpp"
#include "reduce.hpp"
#include "vector_isa.hpp"
#include "vmath.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
namespace layer_norm_rows {  // named, not anonymous: the kernels' lambdas capture these types

// Rows whose statistics are computed together: their square roots and divisions, in double,
// run as one vector instead of one latency chain per row (which took half of the forward's
// time with rows of 64).
constexpr std::int64_t row_block = 16;

// Rows per chunk of the backward (fixed by d, so that the partial sums are too).
inline std::int64_t backward_grain(std::int64_t d) { return grain_for(12 * d); }

// Row sums in sixteen lanes (vmath's lane_sum<16> and fold_lanes<16>): a row of 64 is then four
// dependent adds per lane (eight lanes made each row's sums a chain of eight, which the rows'
// other work waited for); the order of additions depends on d only.
constexpr int sum_lanes = 16;

// mean[i] and rstd[i] = 1/√(var + eps) of the n ≤ row_block rows at x (two passes over each
// row: the mean, then the squared deviations from it).
template <class T>
[[gnu::always_inline]] inline void block_stats(const T* x, std::int64_t n, std::int64_t d, double eps, T* mean,
                                               T* rstd) {  // in each clone
  double var[row_block];
  for (std::int64_t i = 0; i < row_block; ++i) var[i] = 1;
  for (std::int64_t i = 0; i < n; ++i) {
    const T* xr = x + i * d;
    const T m = lane_sum<sum_lanes>(xr, d) / static_cast<T>(d);
    T sq[sum_lanes] = {}, sq_tail = 0;
    std::int64_t j = 0;
    for (; j + sum_lanes <= d; j += sum_lanes)
      for (int k = 0; k < sum_lanes; ++k) sq[k] += (xr[j + k] - m) * (xr[j + k] - m);
    for (std::int64_t t = j; t < d; ++t) sq_tail += (xr[t] - m) * (xr[t] - m);
    mean[i] = m;
    var[i] = static_cast<double>(fold_lanes<sum_lanes>(sq, sq_tail)) / static_cast<double>(d) + eps;
  }
  for (std::int64_t i = 0; i < row_block; ++i) rstd[i] = static_cast<T>(1.0 / std::sqrt(var[i]));
}

// Rows [r0, r1): y = (x − μ) r ⊙ gamma + beta; μ and r of row r in stats[2r], stats[2r + 1].
template <class T>
LOOM_VECTOR_CLONES void forward_rows(const T* __restrict x, const T* __restrict gamma, const T* __restrict beta,
                                     T* __restrict y, T* __restrict stats, std::int64_t r0, std::int64_t r1,
                                     std::int64_t d, double eps) {
  for (std::int64_t rb = r0; rb < r1; rb += row_block) {
    const std::int64_t n = std::min(row_block, r1 - rb);
    T mean[row_block], rstd[row_block];
    block_stats(x + rb * d, n, d, eps, mean, rstd);
    for (std::int64_t i = 0; i < n; ++i) {
      const T* xr = x + (rb + i) * d;
      T* yr = y + (rb + i) * d;
      const T m = mean[i], r = rstd[i];
      for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - m) * r * gamma[j] + beta[j];
      stats[2 * (rb + i)] = m;
      stats[2 * (rb + i) + 1] = r;
    }
  }
}

// Rows [r0, r1) in one pass, with their saved μ and r: dx (stored when Fresh, else added;
// skipped when null), and this chunk's sums Σ dy ⊙ x̂ and Σ dy into pg and pb (zeroed first).
template <class T, bool Fresh>
LOOM_VECTOR_CLONES void backward_rows(const T* __restrict x, const T* __restrict gamma, const T* __restrict dy,
                                      const T* __restrict stats, T* __restrict dx, T* __restrict pg,
                                      T* __restrict pb, T* __restrict g, T* __restrict xhat, std::int64_t r0,
                                      std::int64_t r1, std::int64_t d) {
  std::fill(pg, pg + d, T(0));
  std::fill(pb, pb + d, T(0));
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * d;
    const T* dyr = dy + r * d;
    const T mean = stats[2 * r], rstd = stats[2 * r + 1];
    // g, x̂, the column sums, and the row's sums Σ g and Σ g ⊙ x̂ in the same pass
    T sg[sum_lanes] = {}, sgx[sum_lanes] = {}, sg_tail = 0, sgx_tail = 0;
    std::int64_t j = 0;
    for (; j + sum_lanes <= d; j += sum_lanes)
      for (int k = 0; k < sum_lanes; ++k) {
        const std::int64_t c = j + k;
        g[c] = dyr[c] * gamma[c];
        xhat[c] = (xr[c] - mean) * rstd;
        pg[c] += dyr[c] * xhat[c];
        pb[c] += dyr[c];
        sg[k] += g[c];
        sgx[k] += g[c] * xhat[c];
      }
    for (; j < d; ++j) {
      g[j] = dyr[j] * gamma[j];
      xhat[j] = (xr[j] - mean) * rstd;
      pg[j] += dyr[j] * xhat[j];
      pb[j] += dyr[j];
      sg_tail += g[j];
      sgx_tail += g[j] * xhat[j];
    }
    if (!dx) continue;
    const T mean_g = fold_lanes<sum_lanes>(sg, sg_tail) / static_cast<T>(d);
    const T mean_gx = fold_lanes<sum_lanes>(sgx, sgx_tail) / static_cast<T>(d);
    T* dxr = dx + r * d;
    for (std::int64_t j = 0; j < d; ++j) put<Fresh>(dxr[j], rstd * (g[j] - mean_g - xhat[j] * mean_gx));
  }
}

}  // namespace layer_norm_rows
using namespace layer_norm_rows;

std::int64_t ops::layer_norm_saved(const void*, const dims_t& out, std::span<const dims_t>) {
  const std::int64_t d = out[-1];
  return d ? 2 * (out.size() / d) : 0;
}

std::int64_t ops::layer_norm_scratch(const void*, const dims_t& out, std::span<const dims_t>) {
  const std::int64_t d = out[-1];
  const std::int64_t rows = d ? out.size() / d : 0, grain = backward_grain(d);
  return (rows + grain - 1) / grain * 4 * d;  // pg, pb, g, x̂ per chunk
}

template <class T>
void forward_kernel(layer_norm_def, const op_args<T>& a) {
  const std::int64_t d = a.out_dims[-1];
  const std::int64_t rows = d ? a.out_dims.size() / d : 0;
  if (rows == 0) return;
  if (!a.saved) throw std::logic_error("layer_norm: the executor gave no buffer for the saved row statistics");
  const double eps = a.template attrs<layer_norm_attrs>().eps;
  // (a row's statistics do not depend on which rows share its block: any chunk bounds give the same bits)
  for_chunks(rows, grain_for(6 * d), [&](std::int64_t r0, std::int64_t r1) {
    forward_rows(a.input(0), a.input(1), a.input(2), a.out, a.saved, r0, r1, d, eps);
  });
}

template <class T>
void backward_kernel(layer_norm_def, const op_args<T>& a) {
  T* dx = a.grad(0);
  T* dgamma = a.grad(1);
  T* dbeta = a.grad(2);
  const std::int64_t d = a.out_dims[-1];
  const std::int64_t rows = d ? a.out_dims.size() / d : 0;
  if (rows == 0) {  // nothing to sum (and no workspace): fresh gradients of gamma and beta are zero
    add_chunk_partials(dgamma, a.fresh(1), static_cast<const T*>(nullptr), 0, 0, d);
    add_chunk_partials(dbeta, a.fresh(2), static_cast<const T*>(nullptr), 0, 0, d);
    return;
  }
  if (!a.saved || !a.scratch)
    throw std::logic_error("layer_norm: the executor gave no saved row statistics or no workspace to its backward");
  // one pass: each chunk of rows writes its dx and its partial sums of dgamma and dbeta, which
  // are then added chunk by chunk in order (chunks depend on the sizes only)
  const std::int64_t grain = backward_grain(d), chunks = (rows + grain - 1) / grain;
  T* partial = a.scratch;  // pg, pb, g, x̂ per chunk (layer_norm_scratch)
  with_fresh(a.fresh(0), [&](auto fresh) {
    for_chunks(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) {
        T* pc = partial + c * 4 * d;
        backward_rows<T, fresh()>(a.input(0), a.input(1), a.dout, a.saved, dx, pc, pc + d, pc + 2 * d, pc + 3 * d,
                                  c * grain, std::min(rows, (c + 1) * grain), d);
      }
    });
  });
  add_chunk_partials(dgamma, a.fresh(1), partial, chunks, 4 * d, d);
  add_chunk_partials(dbeta, a.fresh(2), partial + d, chunks, 4 * d, d);
}

template struct compiled_kernels<layer_norm_def>;

}  // namespace loom
