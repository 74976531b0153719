// cross_entropy kernels: logits [.., V], target [..] (int) -> loss [] (mean over the rows
// whose target is not the ignore index; 0 when there are none).
//   forward:  per row, lse = max + log Σ exp(x − max),
//             ℓ = (1 − ε) (lse − x_t) + ε (lse − Σ_c x_c / V);  loss = Σ ℓ / N
//             (rows in parallel, their losses summed in order in double)
//   backward: dx_c += dloss / N · (softmax(x)_c − (1 − ε) [c = t] − ε / V)
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "index_text.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/cross_entropy.hpp"
#include "loom/core/errors.hpp"
#include "loom/core/parallel.hpp"
#include "vector_isa.hpp"
#include "vmath.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
namespace {

// Throws for a target outside [0, V) that is not the ignore index; returns the number of
// rows that count.
std::int64_t counted_rows(const std::int32_t* target, const dims_t& target_dims, std::int64_t classes, long ignore) {
  std::int64_t count = 0;
  for (std::int64_t r = 0; r < target_dims.size(); ++r) {
    if (target[r] == ignore) continue;
    if (target[r] < 0 || target[r] >= classes)
      throw value_error("cross_entropy: target " + std::to_string(target[r]) + " at position " +
                        index_text(r, target_dims) + " is outside the classes [0, " + std::to_string(classes) +
                        ") and is not the ignore index " + std::to_string(ignore));
    ++count;
  }
  return count;
}

// The operands of one cross_entropy node, for forward and backward alike.
template <class T>
struct operands {
  std::int64_t v, rows;  // classes, rows (targets)
  long ignore;
  double eps;  // label smoothing
  const T* x;
  const std::int32_t* target;
  std::int64_t count;  // rows whose target is not ignored

  explicit operands(const op_args<T>& a)
      : v(a.in_dims[0][-1]), rows(a.in_dims[1].size()), ignore(a.template attrs<cross_entropy_attrs>().ignore_index), eps(a.template attrs<cross_entropy_attrs>().label_smoothing), x(a.input(0)),
        target(a.template input<std::int32_t>(1)), count(counted_rows(target, a.in_dims[1], v, ignore)) {}
};

// max and log Σ exp(x − max) of one row
template <class T>
LOOM_VECTOR_CLONES T log_sum_exp(const T* x, std::int64_t v) {
  const T mx = lane_max(x, v);
  if (mx == -std::numeric_limits<T>::infinity()) return mx;
  T lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t c = 0;
  for (; c + 8 <= v; c += 8)
    for (int k = 0; k < 8; ++k) lane[k] += vexp(x[c + k] - mx);
  T total = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; c < v; ++c) total += vexp(x[c] - mx);
  return mx + std::log(total);
}

// dx for one row whose target is t: coef · (softmax(x) − (1 − ε)[c = t] − ε / V), stored when First.
template <class T, bool First>
LOOM_VECTOR_CLONES void backward_row(const T* xr, T* dxr, std::int64_t v, std::int32_t t, T coef, T uniform, T on_target) {
  const T lse = log_sum_exp(xr, v);
  for (std::int64_t c = 0; c < v; ++c) put<First>(dxr[c], coef * (vexp(xr[c] - lse) - uniform));
  dxr[t] -= coef * on_target;
}

}  // namespace

template <class T>
void forward_kernel(cross_entropy_def, const op_args<T>& a) {
  const operands<T> o(a);
  const auto [v, rows, ignore, eps, x, target, count] = o;
  std::vector<double> loss(static_cast<std::size_t>(rows), 0.0);
  for_chunks(rows, grain_for(4 * v), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      if (target[r] == ignore) continue;
      const T* xr = x + r * v;
      const double lse = log_sum_exp(xr, v);
      double row = (1 - eps) * (lse - xr[target[r]]);
      if (eps != 0) {
        double mean = 0;
        for (std::int64_t c = 0; c < v; ++c) mean += xr[c];
        row += eps * (lse - mean / static_cast<double>(v));
      }
      loss[static_cast<std::size_t>(r)] = row;
    }
  });
  double total = 0;
  for (double l : loss) total += l;
  a.out[0] = count ? static_cast<T>(total / static_cast<double>(count)) : T(0);
}

template <class T>
void backward_kernel(cross_entropy_def, const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const operands<T> o(a);
  const auto [v, rows, ignore, eps, x, target, count] = o;
  if (count == 0) {
    if (a.fresh(0)) std::fill(dx, dx + a.in_dims[0].size(), T(0));
    return;
  }
  const bool fresh = a.fresh(0);
  const T coef = static_cast<T>(a.dout[0] / static_cast<double>(count));
  const T uniform = static_cast<T>(eps / static_cast<double>(v));
  const T on_target = static_cast<T>(1 - eps);
  with_fresh(fresh, [&](auto first) {
    for_chunks(rows, grain_for(4 * v), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        T* dxr = dx + r * v;
        if (target[r] == ignore) {
          if constexpr (first()) std::fill(dxr, dxr + v, T(0));
          continue;
        }
        backward_row<T, first()>(x + r * v, dxr, v, target[r], coef, uniform, on_target);
      }
    });
  });
}

template struct compiled_kernels<cross_entropy_def>;

}  // namespace loom
