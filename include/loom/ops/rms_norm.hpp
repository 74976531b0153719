// rms_norm: scales each row by the inverse of its root mean square over the last axis, then by a
// weight (Zhang & Sennrich 2019; Llama's RMSNorm, PyTorch's nn.RMSNorm). No mean is subtracted
// and there is no bias.
//
//   x [.., D], w [D] -> y [.., D]; per row:
//     r = 1 / √(mean(x²) + ε),   y = x · r ⊙ w
//   backward, with g = dy ⊙ w:
//     dx = r · g − x · r³ · mean(x ⊙ g)              (mean over the row)
//     dw = Σ_rows dy ⊙ x · r                         (rows summed in order)
//   forward saves r of each row for backward (one value per row); Σ x² and Σ x ⊙ g are
//   accumulated in double.
#pragma once

#include <span>
#include <tuple>

#include "loom/core/node.hpp"
#include "loom/ops/layer_norm.hpp"  // norm_param_fits

namespace loom {

namespace ops {
/// The row statistic forward saves for backward: r of every row.
std::int64_t rms_norm_saved(const void*, const dims_t& out, std::span<const dims_t> in);
/// The backward's workspace: each chunk of rows' partial sums of dw.
std::int64_t rms_norm_scratch(const void*, const dims_t& out, std::span<const dims_t> in);
}  // namespace ops

/// rms_norm's attributes (stored in its node's descriptor, read by its kernels).
struct rms_norm_attrs {
  double eps = 1e-6;
};
}  // namespace loom
BOOST_HANA_ADAPT_STRUCT(loom::rms_norm_attrs, eps);
namespace loom {

/// rms_norm's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct rms_norm_def : op_def<rms_norm_def, "rms_norm"> {  // traits hold function addresses: a member
  static constexpr op_traits traits{
      .writes_fresh = true,
      .can_run_in_place = true,
      .backward_reads = reads({0, 1}),
      .saved_elements = &ops::rms_norm_saved,
      .scratch_elements = &ops::rms_norm_scratch,
  };
  template <class T> static void forward(const op_args<T>& a);  // ops/rms_norm.cpp
  template <class T> static void backward(const op_args<T>& a);
};

template <double Eps> struct rms_norm_op : rms_norm_def {
  static_assert(Eps > 0, "rms_norm: eps must be positive");
  static constexpr rms_norm_attrs attrs{Eps};
  template <class X, class W> struct rule {
    static_assert(X::rank >= 1, "rms_norm: x needs at least one axis [.., D]");
    static_assert(norm_param_fits<X, W>, "rms_norm: w must be a vector [D] of x's last dim");
    using type = X;
  };
};

/// RMSNorm over the last axis of x [.., D], scaled by w [D], with eps Eps (Llama's
/// `rms_norm_eps`: 1e-5 or 1e-6): y = x / √(mean(x²) + Eps) · w; shape unchanged.
template <double Eps, class X, class W> constexpr node<rms_norm_op<Eps>, X, W> rms_norm(X, W) {
  return {};
}

}  // namespace loom
