// layer_norm: normalises each row over the last axis, then scales and shifts (PyTorch's
// nn.LayerNorm / F.layer_norm with the biased variance).
//
//   x [.., D], gamma [D], beta [D] -> y [.., D]; per row:
//     μ = Σ x / D,  σ² = Σ (x − μ)² / D,  r = 1 / √(σ² + ε),  x̂ = (x − μ) · r
//     y = x̂ ⊙ gamma + beta
//   backward, with g = dy ⊙ gamma:
//     dx     = r · (g − mean(g) − x̂ · mean(g ⊙ x̂))      (means over the row)
//     dgamma = Σ_rows dy ⊙ x̂,   dbeta = Σ_rows dy       (rows summed in order)
//   forward saves μ and r of each row for backward (2 values per row).
#pragma once

#include <tuple>

#include "loom/core/node.hpp"

namespace loom {

/// True when gamma or beta is a vector [D] matching x's last axis.
template <class X, class P>
inline constexpr bool norm_param_fits = [] {
  if constexpr (X::rank < 1 || P::rank != 1)
    return false;
  else
    return std::is_same_v<shape_tail<X, X::rank - 1>, P>;
}();

namespace ops {
/// The row statistics forward saves for backward: μ and r of every row.
std::int64_t layer_norm_saved(const void*, const dims_t& out, std::span<const dims_t> in);
/// The backward's workspace: the per-chunk partial sums of dgamma and dbeta and two rows.
std::int64_t layer_norm_scratch(const void*, const dims_t& out, std::span<const dims_t> in);
}  // namespace ops

/// layer_norm's attributes (stored in its node's descriptor, read by its kernels).
struct layer_norm_attrs {
  double eps = 1e-5;
};
}  // namespace loom
BOOST_HANA_ADAPT_STRUCT(loom::layer_norm_attrs, eps);
namespace loom {

/// layer_norm's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct layer_norm_def : op_def<layer_norm_def, "layer_norm"> {
  static constexpr op_traits traits{
      .writes_fresh = true,
      .can_run_in_place = true,
      .backward_reads = reads({0, 1}),
      .saved_elements = &ops::layer_norm_saved,
      .scratch_elements = &ops::layer_norm_scratch,
  };
  template <class T> static void forward(const op_args<T>& a);  // ops/layer_norm.cpp
  template <class T> static void backward(const op_args<T>& a);
};

template <double Eps>
struct layer_norm_op : layer_norm_def {
  static_assert(Eps > 0, "layer_norm: eps must be positive");
  static constexpr layer_norm_attrs attrs{Eps};
  template <class X, class G, class B>
  struct rule {
    static_assert(X::rank >= 1, "layer_norm: x needs at least one axis [.., D]");
    static_assert(norm_param_fits<X, G>, "layer_norm: gamma must be a vector [D] of x's last dim");
    static_assert(norm_param_fits<X, B>, "layer_norm: beta must be a vector [D] of x's last dim");
    using type = X;
  };
};

/// LayerNorm over the last axis of x [.., D] with gamma [D], beta [D] and eps Eps (PyTorch's
/// default is 1e-5); shape unchanged.
template <double Eps, class X, class G, class B>
constexpr node<layer_norm_op<Eps>, X, G, B> layer_norm(X, G, B) {
  return {};
}

}  // namespace loom
