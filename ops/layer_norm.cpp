// layer_norm kernels, over the last axis: x [.., D], gamma [D], beta [D] -> y [.., D].
//   forward:  μ = Σ x / D, σ² = Σ (x − μ)² / D, r = 1/√(σ² + ε), x̂ = (x − μ) r,
//             y = x̂ ⊙ gamma + beta   (statistics in eight-lane sums of T)
//   backward: g = dy ⊙ gamma;  dx += r (g − mean(g) − x̂ mean(g ⊙ x̂));
//             dgamma += Σ_rows dy ⊙ x̂;  dbeta += Σ_rows dy  — one pass over the rows: each
//             chunk of rows (bounds fixed by the sizes) sums its own, the chunks are then added
//             in order, so sums do not depend on the thread count
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernel.hpp"
#include "loom/ops/layer_norm.hpp"
#include "parallel.hpp"
#include "reduce.hpp"
#include "vector_isa.hpp"
#include "vmath.hpp"

namespace loom::ops {
namespace layer_norm_rows {  // named, not anonymous: the kernels' lambdas capture these types

template <class T>
struct row_stats {
  T mean, rstd;
};

// mean and 1/√(var + eps) of one row, in eight-lane sums (vectorised; the order of additions
// depends on d only)
template <class T>
[[gnu::always_inline]] inline row_stats<T> stats_of(const T* x, std::int64_t d, double eps) {  // in each clone
  const T mean = lane_sum(x, d) / static_cast<T>(d);
  T lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t j = 0;
  for (; j + 8 <= d; j += 8)
    for (int k = 0; k < 8; ++k) lane[k] += (x[j + k] - mean) * (x[j + k] - mean);
  T sq = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; j < d; ++j) sq += (x[j] - mean) * (x[j] - mean);
  return {mean, static_cast<T>(1.0 / std::sqrt(static_cast<double>(sq) / static_cast<double>(d) + eps))};
}

// Rows [r0, r1): y = (x − μ) r ⊙ gamma + beta.
template <class T>
LOOM_VECTOR_CLONES void forward_rows(const T* __restrict x, const T* __restrict gamma, const T* __restrict beta,
                                     T* __restrict y, std::int64_t r0, std::int64_t r1, std::int64_t d, double eps) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    const row_stats<T> s = stats_of(xr, d, eps);
    for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - s.mean) * s.rstd * gamma[j] + beta[j];
  }
}

// Rows [r0, r1) in one pass: the statistics again, dx (stored when Fresh, else added; skipped
// when null), and this chunk's sums Σ dy ⊙ x̂ and Σ dy into pg and pb (zeroed first).
template <class T, bool Fresh>
LOOM_VECTOR_CLONES void backward_rows(const T* __restrict x, const T* __restrict gamma, const T* __restrict dy,
                                      T* __restrict dx, T* __restrict pg, T* __restrict pb, T* __restrict g,
                                      T* __restrict xhat, std::int64_t r0, std::int64_t r1, std::int64_t d, double eps) {
  std::fill(pg, pg + d, T(0));
  std::fill(pb, pb + d, T(0));
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * d;
    const T* dyr = dy + r * d;
    const row_stats<T> s = stats_of(xr, d, eps);
    for (std::int64_t j = 0; j < d; ++j) {
      g[j] = dyr[j] * gamma[j];
      xhat[j] = (xr[j] - s.mean) * s.rstd;
      pg[j] += dyr[j] * xhat[j];
      pb[j] += dyr[j];
    }
    if (!dx) continue;
    const T mean_g = lane_sum(g, d) / static_cast<T>(d);
    const T mean_gx = lane_dot(g, xhat, d) / static_cast<T>(d);
    T* dxr = dx + r * d;
    for (std::int64_t j = 0; j < d; ++j) put<Fresh>(dxr[j], s.rstd * (g[j] - mean_g - xhat[j] * mean_gx));
  }
}

}  // namespace layer_norm_rows
using namespace layer_norm_rows;

template <class T>
void layer_norm_kernel<T>::forward(const op_args<T>& a) {
  const std::int64_t d = a.out_dims[-1];
  const std::int64_t rows = d ? a.out_dims.size() / d : 0;
  const double eps = a.template attrs<layer_norm_attrs>().eps;
  for_chunks(rows, grain_for(6 * d), [&](std::int64_t r0, std::int64_t r1) {
    forward_rows(a.input(0), a.input(1), a.input(2), a.out, r0, r1, d, eps);
  });
}

template <class T>
void layer_norm_kernel<T>::backward(const op_args<T>& a) {
  T* dx = a.grad(0);
  T* dgamma = a.grad(1);
  T* dbeta = a.grad(2);
  const std::int64_t d = a.out_dims[-1];
  const std::int64_t rows = d ? a.out_dims.size() / d : 0;
  const double eps = a.template attrs<layer_norm_attrs>().eps;
  // one pass: each chunk of rows writes its dx and its partial sums of dgamma and dbeta, which
  // are then added chunk by chunk in order (chunks depend on the sizes only)
  const std::int64_t grain = grain_for(12 * d), chunks = (rows + grain - 1) / grain;
  std::vector<T> partial(static_cast<std::size_t>(chunks * 4 * d));  // pg, pb, g, xhat per chunk
  with_fresh(a.fresh(0), [&](auto fresh) {
    for_chunks(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) {
        T* pc = partial.data() + c * 4 * d;
        backward_rows<T, fresh()>(a.input(0), a.input(1), a.dout, dx, pc, pc + d, pc + 2 * d, pc + 3 * d, c * grain,
                                  std::min(rows, (c + 1) * grain), d, eps);
      }
    });
  });
  add_chunk_partials(dgamma, a.fresh(1), partial.data(), chunks, 4 * d, d);
  add_chunk_partials(dbeta, a.fresh(2), partial.data() + d, chunks, 4 * d, d);
}

template struct layer_norm_kernel<float>;
template struct layer_norm_kernel<double>;

}  // namespace loom::ops
