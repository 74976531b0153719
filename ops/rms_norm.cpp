// rms_norm kernels, over the last axis: x [.., D], w [D] -> y [.., D].
//   forward:  r = 1/√(Σ x² / D + ε) (Σ in double, eight fixed lanes), y = x · r ⊙ w; r saved per row
//   backward: g = dy ⊙ w;  dx (+)= r g − x r³ mean(x ⊙ g)  (Σ in double);
//             dw (+)= Σ_rows dy ⊙ x r — each chunk of rows (bounds fixed by the sizes) sums its own
//             in the node's workspace, the chunks are then added in order, so sums do not depend
//             on the thread count
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/core/parallel.hpp"
#include "loom/ops/norm.hpp"
#include "reduce.hpp"
#include "vector_isa.hpp"
#include "vmath.hpp"

namespace loom {
using namespace ops;       // the kernels' helpers
namespace rms_norm_rows {  // named, not anonymous: the kernels' lambdas capture these types

// Rows per chunk of the backward (fixed by d, so that the partial sums are too).
inline std::int64_t backward_grain(std::int64_t d) {
  return grain_for(8 * d);
}

constexpr int sum_lanes = 8;

// Σ a[j] · b[j] · s[j] for j < d (s = 1 when null), in double: eight lanes folded in a fixed
// tree, so the order of additions depends on d only.
template <class T>
[[gnu::always_inline]] inline double dot_in_double(const T* a, const T* b, const T* s, std::int64_t d) {
  double lane[sum_lanes] = {};
  std::int64_t j = 0;
  for (; j + sum_lanes <= d; j += sum_lanes)
    for (int k = 0; k < sum_lanes; ++k) {
      const double scaled = s ? static_cast<double>(b[j + k] * s[j + k]) : static_cast<double>(b[j + k]);
      lane[k] += static_cast<double>(a[j + k]) * scaled;
    }
  double tail = 0;
  for (; j < d; ++j) tail += static_cast<double>(a[j]) * static_cast<double>(s ? b[j] * s[j] : b[j]);
  return fold_lanes<sum_lanes>(lane, tail);
}

// Rows [r0, r1): y = x · r ⊙ w, r of row i in rstd[i]. y may be x (in place): a row is read
// whole before it is written.
template <class T>
LOOM_VECTOR_CLONES void forward_rows(const T* x, const T* __restrict w, T* y, T* __restrict rstd, std::int64_t r0,
                                     std::int64_t r1, std::int64_t d, double eps) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    const double mean_square = dot_in_double<T>(xr, xr, nullptr, d) / static_cast<double>(d);
    const T inv_rms = static_cast<T>(1.0 / std::sqrt(mean_square + eps));
    for (std::int64_t j = 0; j < d; ++j) yr[j] = xr[j] * inv_rms * w[j];
    rstd[r] = inv_rms;
  }
}

// Rows [r0, r1) with their saved r: dx (stored when Fresh, else added; skipped when null), and
// this chunk's sums Σ dy ⊙ x r into pw (zeroed first; skipped when null).
template <class T, bool Fresh>
LOOM_VECTOR_CLONES void backward_rows(const T* __restrict x, const T* __restrict w, const T* __restrict dy,
                                      const T* __restrict rstd, T* __restrict dx, T* __restrict pw, std::int64_t r0,
                                      std::int64_t r1, std::int64_t d) {
  if (pw) std::fill(pw, pw + d, T(0));
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * d;
    const T* dyr = dy + r * d;
    const T inv_rms = rstd[r];
    if (pw)
      for (std::int64_t j = 0; j < d; ++j) pw[j] += dyr[j] * xr[j] * inv_rms;
    if (!dx) continue;
    const double mean_xg = dot_in_double<T>(xr, dyr, w, d) / static_cast<double>(d);
    const double rd = static_cast<double>(inv_rms);
    const T x_coef = static_cast<T>(rd * rd * rd * mean_xg);  // r³ mean(x ⊙ g)
    T* dxr = dx + r * d;
    for (std::int64_t j = 0; j < d; ++j) put<Fresh>(dxr[j], inv_rms * (dyr[j] * w[j]) - xr[j] * x_coef);
  }
}

}  // namespace rms_norm_rows
using namespace rms_norm_rows;

std::int64_t ops::rms_norm_saved(const void*, const dims_t& out, std::span<const dims_t>) {
  const std::int64_t d = out[-1];
  return d ? out.size() / d : 0;
}

std::int64_t ops::rms_norm_scratch(const void*, const dims_t& out, std::span<const dims_t>) {
  const std::int64_t d = out[-1];
  const std::int64_t rows = d ? out.size() / d : 0, grain = backward_grain(d);
  return (rows + grain - 1) / grain * d;  // the partial dw of each chunk
}

template <class T> void forward_kernel(rms_norm_def, const op_args<T>& a) {
  const std::int64_t d = a.out_dims[-1];
  const std::int64_t rows = d ? a.out_dims.size() / d : 0;
  if (rows == 0) return;
  if (!a.saved) throw std::logic_error("rms_norm: the executor gave no buffer for the saved row statistics");
  const double eps = a.template attrs<rms_norm_attrs>().eps;
  // (each row is computed alone: any chunk bounds give the same bits)
  for_chunks(rows, grain_for(4 * d), [&](std::int64_t r0, std::int64_t r1) {
    forward_rows(a.input(0), a.input(1), a.out, a.saved, r0, r1, d, eps);
  });
}

template <class T> void backward_kernel(rms_norm_def, const op_args<T>& a) {
  T* dx = a.grad(0);
  T* dw = a.grad(1);
  const std::int64_t d = a.out_dims[-1];
  const std::int64_t rows = d ? a.out_dims.size() / d : 0;
  if (rows == 0) {  // nothing to sum (and no workspace): a fresh gradient of w is zero
    add_chunk_partials(dw, a.fresh(1), static_cast<const T*>(nullptr), 0, 0, d);
    return;
  }
  if (!a.saved || (dw && !a.scratch))
    throw std::logic_error("rms_norm: the executor gave no saved row statistics or no workspace to its backward");
  // one pass: each chunk of rows writes its dx and its partial sums of dw, which are then added
  // chunk by chunk in order (chunks depend on the sizes only); dx is complete before dw starts,
  // as the contract asks when x and w are one node
  const std::int64_t grain = backward_grain(d), chunks = (rows + grain - 1) / grain;
  with_fresh(a.fresh(0), [&](auto fresh) {
    for_chunks(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c)
        backward_rows<T, fresh()>(a.input(0), a.input(1), a.dout, a.saved, dx, dw ? a.scratch + c * d : nullptr,
                                  c * grain, std::min(rows, (c + 1) * grain), d);
    });
  });
  add_chunk_partials(dw, a.fresh(1), static_cast<const T*>(a.scratch), chunks, d, d);
}

template struct compiled_kernels<rms_norm_def>;

}  // namespace loom
