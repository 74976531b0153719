// layer_norm kernels, over the last axis: x [.., D], gamma [D], beta [D] -> y [.., D].
//   forward:  μ = Σ x / D, σ² = Σ (x − μ)² / D, r = 1/√(σ² + ε), x̂ = (x − μ) r,
//             y = x̂ ⊙ gamma + beta   (statistics in eight-lane sums of T)
//   backward: g = dy ⊙ gamma;  dx += r (g − mean(g) − x̂ mean(g ⊙ x̂));
//             dgamma += Σ_rows dy ⊙ x̂;  dbeta += Σ_rows dy  (columns in parallel chunks,
//             rows in order inside each, so sums do not depend on the thread count)
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernel.hpp"
#include "loom/ops/layer_norm.hpp"
#include "parallel.hpp"
#include "reduce.hpp"
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
row_stats<T> stats_of(const T* x, std::int64_t d, double eps) {
  const T mean = lane_sum(x, d) / static_cast<T>(d);
  T lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t j = 0;
  for (; j + 8 <= d; j += 8)
    for (int k = 0; k < 8; ++k) lane[k] += (x[j + k] - mean) * (x[j + k] - mean);
  T sq = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; j < d; ++j) sq += (x[j] - mean) * (x[j] - mean);
  return {mean, static_cast<T>(1.0 / std::sqrt(static_cast<double>(sq) / static_cast<double>(d) + eps))};
}

}  // namespace layer_norm_rows
using namespace layer_norm_rows;

template <class T>
void layer_norm_kernel<T>::forward(const op_args<T>& a) {
  const std::int64_t d = a.out_dims[-1];
  const std::int64_t rows = d ? a.out_dims.size() / d : 0;
  const double eps = a.template attrs<layer_norm_attrs>().eps;
  const T* x = a.input(0);
  const T* gamma = a.input(1);
  const T* beta = a.input(2);
  T* y = a.out;
  for_chunks(rows, grain_for(6 * d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * d;
      T* yr = y + r * d;
      const row_stats<T> s = stats_of(xr, d, eps);
      for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - s.mean) * s.rstd * gamma[j] + beta[j];
    }
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
  const T* x = a.input(0);
  const T* gamma = a.input(1);
  const T* dy = a.dout;
  // the forward's statistics, recomputed (nothing is kept between passes)
  std::vector<row_stats<T>> stats(static_cast<std::size_t>(rows));
  for_chunks(rows, grain_for(3 * d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) stats[static_cast<std::size_t>(r)] = stats_of(x + r * d, d, eps);
  });
  if (dx) {
    with_fresh(a.fresh(0), [&](auto fresh) {
      for_chunks(rows, grain_for(8 * d), [&](std::int64_t r0, std::int64_t r1) {
        std::vector<T> g(static_cast<std::size_t>(d)), xhat(static_cast<std::size_t>(d));
        for (std::int64_t r = r0; r < r1; ++r) {
          const row_stats<T> s = stats[static_cast<std::size_t>(r)];
          const T* xr = x + r * d;
          const T* dyr = dy + r * d;
          for (std::int64_t j = 0; j < d; ++j) {
            g[static_cast<std::size_t>(j)] = dyr[j] * gamma[j];
            xhat[static_cast<std::size_t>(j)] = (xr[j] - s.mean) * s.rstd;
          }
          const T mean_g = lane_sum(g.data(), d) / static_cast<T>(d);
          const T mean_gx = lane_dot(g.data(), xhat.data(), d) / static_cast<T>(d);
          T* dxr = dx + r * d;
          for (std::int64_t j = 0; j < d; ++j)
            put<fresh()>(dxr[j], s.rstd * (g[static_cast<std::size_t>(j)] - mean_g -
                                           xhat[static_cast<std::size_t>(j)] * mean_gx));
        }
      });
    });
  }
  // dgamma = Σ_rows dy ⊙ x̂, dbeta = Σ_rows dy, in one pass
  auto xhat = [&](std::int64_t r, std::int64_t j) {
    const row_stats<T> s = stats[static_cast<std::size_t>(r)];
    return (x[r * d + j] - s.mean) * s.rstd;
  };
  sum_over_rows(rows, d, column_sum{dgamma, a.fresh(1), [&](std::int64_t r, std::int64_t j) { return dy[r * d + j] * xhat(r, j); }},
                column_sum{dbeta, a.fresh(2), [&](std::int64_t r, std::int64_t j) { return dy[r * d + j]; }});
}

template struct layer_norm_kernel<float>;
template struct layer_norm_kernel<double>;

}  // namespace loom::ops
