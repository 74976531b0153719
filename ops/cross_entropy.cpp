// cross_entropy kernels: logits [.., V], target [..] (int) -> loss [] (mean over the rows
// whose target is not the ignore index; 0 when there are none).
//   forward:  per row, lse = max + log Σ exp(x − max),
//             ℓ = (1 − ε) (lse − x_t) + ε (lse − Σ_c x_c / V);  loss = Σ ℓ / N
//             (rows in parallel, their losses summed in order in double)
//   backward: dx_c += dloss / N · (softmax(x)_c − (1 − ε) [c = t] − ε / V)
#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <limits>
#include <string>
#include <vector>

#include "fused_cross_entropy.hpp"
#include "gemm_chunks.hpp"
#include "index_text.hpp"
#include "int8_gemm.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/ops/cross_entropy.hpp"
#include "loom/core/errors.hpp"
#include "loom/core/parallel.hpp"
#include "reduce.hpp"
#include "sgemm_avx512.hpp"
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

// dx for one row whose target is t: coef · (softmax(x) − (1 − ε)[c = t] − ε / V), stored when
// First; lse is the row's log_sum_exp. dxr may be xr (each element read before it is written).
template <class T, bool First>
LOOM_VECTOR_CLONES void gradient_row(const T* xr, T lse, T* dxr, std::int64_t v, std::int32_t t, T coef, T uniform,
                                     T on_target) {
  for (std::int64_t c = 0; c < v; ++c) put<First>(dxr[c], coef * (vexp(xr[c] - lse) - uniform));
  dxr[t] -= coef * on_target;
}
template <class T, bool First>
void backward_row(const T* xr, T* dxr, std::int64_t v, std::int32_t t, T coef, T uniform, T on_target) {
  gradient_row<T, First>(xr, log_sum_exp(xr, v), dxr, v, t, coef, uniform, on_target);
}

// z += b, one row of v.
template <class T>
LOOM_VECTOR_CLONES void add_row(T* __restrict z, const T* __restrict b, std::int64_t v) {
  for (std::int64_t c = 0; c < v; ++c) z[c] = z[c] + b[c];
}

// One row's loss (1 − ε)(lse − x_t) + ε (lse − Σ_c x_c / V), in double.
template <class T>
double row_loss(const T* xr, double lse, std::int64_t v, std::int32_t t, double eps) {
  double row = (1 - eps) * (lse - xr[t]);
  if (eps != 0) {
    double mean = 0;
    for (std::int64_t c = 0; c < v; ++c) mean += xr[c];
    row += eps * (lse - mean / static_cast<double>(v));
  }
  return row;
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
      loss[static_cast<std::size_t>(r)] = row_loss(xr, log_sum_exp(xr, v), v, target[r], eps);
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

// ---- linear_cross_entropy: the head's product and the loss, chunk by chunk (fused_cross_entropy.hpp)

namespace ops {
namespace {

std::atomic<std::int64_t> forced_rows{0};  // linear_cross_entropy_force_rows

struct head {
  std::int64_t n, v, k;  // rows, classes, the product's inner size
  int target;            // the target's input
};
head head_of(const linear_cross_entropy_params& p, std::span<const dims_t> in) {
  const int t = p.bias ? 3 : 2;
  return {in[static_cast<std::size_t>(t)].size(), in[1][0], in[1][1], t};
}

// The saved buffer's parts: the gradients for dloss = 1 (dx [n, k], dw [v, k], db [v]), then one
// chunk's logits.
template <class T>
struct saved_parts {
  T *dx = nullptr, *dw = nullptr, *db = nullptr, *z = nullptr;
  saved_parts() = default;  // no saved buffer
  saved_parts(T* s, const head& h) : dx(s), dw(dx + h.n * h.k), db(dw + h.v * h.k), z(db + h.v) {}
};

// z [rows, v] = x_c · Wᵀ from an inference executor's int8 weights (exec_options::weights), as
// the unfused product reads them; false, having done nothing, without them.
template <class T>
bool int8_product(const op_args<T>& a, const T* xc, std::int64_t rows, std::int64_t k, std::int64_t v, T* z) {
  if constexpr (std::is_same_v<T, float>) {
    if (!a.int8) return false;
    int8_gemm(rows, xc, k, *a.int8, z, v);
    return true;
  } else {
    return false;
  }
}

// Rows [r0, r0 + rows) of the logits x wᵀ (+ b) into z (rows × v). `wp`: w packed once for
// every chunk (float, loom's kernel), else null.
template <class T>
void chunk_logits(const op_args<T>& a, const T* x, const T* w, const T* b, std::int64_t r0, std::int64_t rows,
                  std::int64_t v, std::int64_t k, T* z, const sgemm_packed_b* wp) {
  if (rows == 0 || v == 0) return;
  if (k == 0)
    std::fill(z, z + rows * v, T(0));
  else if (!int8_product(a, x + r0 * k, rows, k, v, z))  // else the int8 weights' product, as unfused
    gemm_chunks::batched_gemm<T>(false, true, 1, rows, v, k, x + r0 * k, k, 0, w, k, 0, z, 0, T(0), a.bf16, wp);
  if (b)
    for_chunks(rows, grain_for(v), [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) add_row(z + i * v, b, v);
    });
}

// w as loom's float kernel packs it for x wᵀ, when more than one chunk reads it (else the one
// product packs its own, as the unfused one does); null otherwise.
template <class T>
const sgemm_packed_b* packed_weight(std::optional<sgemm_packed_b>& made, const op_args<T>& a, const T* w,
                                    std::int64_t v, std::int64_t k, bool several) {
  if constexpr (std::is_same_v<T, float>) {
    if (several && !a.bf16 && k > 0 && v > 0) {
      const sgemm_packed_b& p = made.emplace(true, v, k, w, k);
      return p.packed() ? &p : nullptr;
    }
  }
  return nullptr;
}

// dst[i] = s · src[i] (First) or dst[i] += s · src[i], for i in [i0, i1).
template <class T, bool First>
LOOM_VECTOR_CLONES void scaled_into(T* __restrict dst, const T* __restrict src, T s, std::int64_t i0, std::int64_t i1) {
  for (std::int64_t i = i0; i < i1; ++i) put<First>(dst[i], s * src[i]);
}

template <class T>
void scale_gradient(T* dst, const T* src, T s, std::int64_t count, bool fresh) {
  if (!dst) return;
  with_fresh(fresh, [&](auto first) {
    for_chunks(count, 1 << 14, [&](std::int64_t i0, std::int64_t i1) { scaled_into<T, first()>(dst, src, s, i0, i1); });
  });
}

}  // namespace

std::int64_t linear_cross_entropy_chunk_rows(const linear_cross_entropy_params& p, std::int64_t v) {
  if (p.forced_rows > 0) return p.forced_rows;
  return std::max<std::int64_t>(256, (std::int64_t{1} << 21) / std::max<std::int64_t>(v, 1) / 16 * 16);
}

void linear_cross_entropy_force_rows(std::int64_t rows) {
  if (rows < 0)
    throw std::invalid_argument("linear_cross_entropy_force_rows: rows must be 0 (the shape's rule) or positive, not " +
                                std::to_string(rows));
  forced_rows.store(rows, std::memory_order_relaxed);
}
std::int64_t linear_cross_entropy_forced_rows() { return forced_rows.load(std::memory_order_relaxed); }

std::int64_t linear_cross_entropy_saved(const void* params, const dims_t&, std::span<const dims_t> in) {
  const auto& p = *static_cast<const linear_cross_entropy_params*>(params);
  const head h = head_of(p, in);
  const std::int64_t rows = std::min(h.n, linear_cross_entropy_chunk_rows(p, h.v));
  return h.n * h.k + h.v * h.k + h.v + rows * h.v;
}

template <class T>
void linear_cross_entropy_kernels::forward(const op_args<T>& a) {
  const auto& p = *static_cast<const linear_cross_entropy_params*>(a.fused);
  const head h = head_of(p, a.in_dims);
  const auto [n, v, k, ti] = h;
  const long ignore = p.attrs.ignore_index;
  const double eps = p.attrs.label_smoothing;
  const std::int32_t* target = a.template input<std::int32_t>(ti);
  const std::int64_t count = counted_rows(target, a.in_dims[static_cast<std::size_t>(ti)], v, ignore);
  const T *x = a.input(0), *w = a.input(1), *b = p.bias ? a.input(2) : nullptr;
  const std::int64_t chunk = linear_cross_entropy_chunk_rows(p, v);
  // the saved buffer's parts, or without one (no backward: op_traits::saved_only_for_backward)
  // one chunk's logits of this call's own
  std::vector<T> own;
  if (!a.saved) own.resize(static_cast<std::size_t>(std::min(n, chunk) * v));
  const saved_parts<T> s = a.saved ? saved_parts<T>(a.saved, h) : saved_parts<T>();
  T* const z_chunk = a.saved ? s.z : own.data();
  // the gradients backward will scale (by dloss), for the inputs that get one
  const bool grads = a.will_backward && a.saved;
  T* dx = grads && a.grad(0) ? s.dx : nullptr;
  T* dw = grads && a.grad(1) ? s.dw : nullptr;
  T* db = grads && b && a.grad(2) ? s.db : nullptr;
  if (count == 0) {  // no row counts: loss 0, every gradient 0
    if (dx) std::fill(dx, dx + n * k, T(0));
    if (dw) std::fill(dw, dw + v * k, T(0));
    if (db) std::fill(db, db + v, T(0));
    a.out[0] = T(0);
    return;
  }
  const T coef = static_cast<T>(1.0 / static_cast<double>(count));
  const T uniform = static_cast<T>(eps / static_cast<double>(v));
  const T on_target = static_cast<T>(1 - eps);
  std::optional<sgemm_packed_b> made;
  const sgemm_packed_b* wp = packed_weight(made, a, w, v, k, n > chunk);
  std::vector<double> loss(static_cast<std::size_t>(n), 0.0);
  for (std::int64_t r0 = 0; r0 < n; r0 += chunk) {
    const std::int64_t rows = std::min(chunk, n - r0);
    const bool first = r0 == 0;
    T* z = z_chunk;
    chunk_logits(a, x, w, b, r0, rows, v, k, z, wp);
    const bool any_grad = dx || dw || db;
    for_chunks(rows, grain_for(4 * v), [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const std::int64_t r = r0 + i;
        T* zr = z + i * v;
        if (target[r] == ignore) {
          if (any_grad) std::fill(zr, zr + v, T(0));
          continue;
        }
        const T lse = log_sum_exp(zr, v);
        loss[static_cast<std::size_t>(r)] = row_loss(zr, lse, v, target[r], eps);
        if (any_grad) gradient_row<T, true>(zr, lse, zr, v, target[r], coef, uniform, on_target);  // z → g
      }
    });
    // the unfused head's backward on this chunk's rows (for dloss = 1): db, dx = g w, dw (+)= gᵀ x
    if (db) sum_over_rows(z, v, rows, v, db, first);
    if (dx && k > 0)  // dx_c = g · w (one row item over many classes: a split sum, gemm_chunks::split_sum)
      gemm_chunks::batched_gemm<T>(false, false, 1, rows, k, v, z, v, 0, w, k, 0, dx + r0 * k, 0, T(0), a.bf16);
    if (dw && k > 0)
      gemm_chunks::summed_gemm<T>(true, false, 1, v, k, rows, z, v, 0, x + r0 * k, k, 0, dw, first ? T(0) : T(1), a.bf16);
  }
  double total = 0;
  for (double l : loss) total += l;
  a.out[0] = static_cast<T>(total / static_cast<double>(count));
}

template <class T>
void linear_cross_entropy_kernels::backward(const op_args<T>& a) {
  const auto& p = *static_cast<const linear_cross_entropy_params*>(a.fused);
  const head h = head_of(p, a.in_dims);
  const saved_parts<const T> s(a.saved, h);
  const T dloss = a.dout[0];
  scale_gradient(a.grad(0), s.dx, dloss, h.n * h.k, a.fresh(0));
  scale_gradient(a.grad(1), s.dw, dloss, h.v * h.k, a.fresh(1));
  if (p.bias) scale_gradient(a.grad(2), s.db, dloss, h.v, a.fresh(2));
}

template void linear_cross_entropy_kernels::forward(const op_args<float>&);
template void linear_cross_entropy_kernels::forward(const op_args<double>&);
template void linear_cross_entropy_kernels::backward(const op_args<float>&);
template void linear_cross_entropy_kernels::backward(const op_args<double>&);

}  // namespace ops
}  // namespace loom
