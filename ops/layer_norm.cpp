// layer_norm kernels, over the last axis: x [.., D], gamma [D], beta [D] -> y [.., D].
//   forward:  μ = Σ x / D, σ² = Σ (x − μ)² / D, r = 1/√(σ² + ε), x̂ = (x − μ) r,
//             y = x̂ ⊙ gamma + beta   (statistics accumulated in double)
//   backward: g = dy ⊙ gamma;  dx += r (g − mean(g) − x̂ mean(g ⊙ x̂));
//             dgamma += Σ_rows dy ⊙ x̂;  dbeta += Σ_rows dy  (columns in parallel chunks,
//             rows in order inside each, so sums do not depend on the thread count)
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.hpp"
#include "parallel.hpp"

namespace loom::ops {
namespace {

struct row_stats {
  double mean, rstd;
};

template <class T>
row_stats stats_of(const T* x, std::int64_t d, double eps) {
  double total = 0;
  for (std::int64_t j = 0; j < d; ++j) total += x[j];
  const double mean = total / static_cast<double>(d);
  double sq = 0;
  for (std::int64_t j = 0; j < d; ++j) {
    const double c = x[j] - mean;
    sq += c * c;
  }
  return {mean, 1.0 / std::sqrt(sq / static_cast<double>(d) + eps)};
}

}  // namespace

template <class T>
void layer_norm_kernel<T>::forward(const op_args<T>& a) {
  const std::int64_t d = a.out_dims[-1];
  const std::int64_t rows = d ? a.out_dims.size() / d : 0;
  const double eps = a.node->fattr[0];
  const T* x = a.input(0);
  const T* gamma = a.input(1);
  const T* beta = a.input(2);
  T* y = a.out;
  for_chunks(rows, grain_for(6 * d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * d;
      T* yr = y + r * d;
      const row_stats s = stats_of(xr, d, eps);
      for (std::int64_t j = 0; j < d; ++j) {
        const T xhat = static_cast<T>((xr[j] - s.mean) * s.rstd);
        yr[j] = xhat * gamma[j] + beta[j];
      }
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
  if (rows == 0) return;
  const double eps = a.node->fattr[0];
  const T* x = a.input(0);
  const T* gamma = a.input(1);
  const T* dy = a.dout;
  // the forward's statistics, recomputed (nothing is kept between passes)
  std::vector<row_stats> stats(static_cast<std::size_t>(rows));
  for_chunks(rows, grain_for(3 * d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) stats[static_cast<std::size_t>(r)] = stats_of(x + r * d, d, eps);
  });
  if (dx) {
    for_chunks(rows, grain_for(8 * d), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const row_stats s = stats[static_cast<std::size_t>(r)];
        const T* xr = x + r * d;
        const T* dyr = dy + r * d;
        double sum_g = 0, sum_gx = 0;
        for (std::int64_t j = 0; j < d; ++j) {
          const double g = static_cast<double>(dyr[j]) * gamma[j];
          sum_g += g;
          sum_gx += g * (xr[j] - s.mean) * s.rstd;
        }
        const double mean_g = sum_g / static_cast<double>(d), mean_gx = sum_gx / static_cast<double>(d);
        T* dxr = dx + r * d;
        for (std::int64_t j = 0; j < d; ++j) {
          const double g = static_cast<double>(dyr[j]) * gamma[j];
          const double xhat = (xr[j] - s.mean) * s.rstd;
          dxr[j] += static_cast<T>(s.rstd * (g - mean_g - xhat * mean_gx));
        }
      }
    });
  }
  if (dgamma || dbeta) {
    // at least 16 columns (a cache line of floats) per chunk: each chunk reads every row
    for_chunks(d, std::max<std::int64_t>(grain_for(2 * rows), 16), [&](std::int64_t j0, std::int64_t j1) {
      for (std::int64_t r = 0; r < rows; ++r) {
        const row_stats s = stats[static_cast<std::size_t>(r)];
        const T* xr = x + r * d;
        const T* dyr = dy + r * d;
        for (std::int64_t j = j0; j < j1; ++j) {
          if (dgamma) dgamma[j] += dyr[j] * static_cast<T>((xr[j] - s.mean) * s.rstd);
          if (dbeta) dbeta[j] += dyr[j];
        }
      }
    });
  }
}

template struct layer_norm_kernel<float>;
template struct layer_norm_kernel<double>;

}  // namespace loom::ops
