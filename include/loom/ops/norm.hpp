// Normalisations over the last axis: layer_norm and rms_norm.
//
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
//
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

namespace loom {

/// True when gamma or beta (or rms_norm's w) is a vector [D] matching x's last axis.
template <class X, class P>
inline constexpr bool norm_param_fits = [] {
  if constexpr (X::rank < 1 || P::rank != 1)
    return false;
  else
    return std::is_same_v<shape_tail<X, X::rank - 1>, P>;
}();

namespace ops {
/// What forward saves for backward: μ and r of every row (layer_norm), r of every row (rms_norm).
std::int64_t layer_norm_saved(const void*, const dims_t& out, std::span<const dims_t> in);
std::int64_t rms_norm_saved(const void*, const dims_t& out, std::span<const dims_t> in);
/// The backward's workspace: each chunk of rows' partial sums of the scale's gradient (and of
/// dbeta, and two rows, for layer_norm).
std::int64_t layer_norm_scratch(const void*, const dims_t& out, std::span<const dims_t> in);
std::int64_t rms_norm_scratch(const void*, const dims_t& out, std::span<const dims_t> in);
}  // namespace ops

/// The traits of a normalisation over the last axis: in place, writes fresh, its backward reads
/// x and the scale (input 1), it saves `saved` row statistics for backward and needs `scratch`
/// elements of workspace there. (Traits that hold function addresses are an op's member, not
/// op_def's argument.)
constexpr op_traits row_norm_traits(decltype(op_traits::saved_elements) saved,
                                    decltype(op_traits::scratch_elements) scratch) {
  return {.writes_fresh = true,
          .can_run_in_place = true,
          .backward_reads = reads({0, 1}),
          .saved_elements = saved,
          .scratch_elements = scratch};
}

// ---- layer_norm

/// layer_norm's attributes (stored in its node's descriptor, read by its kernels).
struct layer_norm_attrs {
  double eps = 1e-5;
};

struct layer_norm_def : op_def<layer_norm_def, "layer_norm">, compiled_kernels<layer_norm_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr op_traits traits = row_norm_traits(&ops::layer_norm_saved, &ops::layer_norm_scratch);
  template <class X, class G, class B>
  struct rule {
    static_assert(X::rank >= 1, "layer_norm: x needs at least one axis [.., D]");
    static_assert(norm_param_fits<X, G>, "layer_norm: gamma must be a vector [D] of x's last dim");
    static_assert(norm_param_fits<X, B>, "layer_norm: beta must be a vector [D] of x's last dim");
    using type = X;
  };
};
extern template struct compiled_kernels<layer_norm_def>;  // ops/layer_norm.cpp

template <double Eps>
using layer_norm_op = attributed<layer_norm_def, layer_norm_attrs{Eps}>;

/// LayerNorm over the last axis of x [.., D] with gamma [D], beta [D] and eps Eps (PyTorch's
/// default is 1e-5); shape unchanged.
template <double Eps, class X, class G, class B>
constexpr node<layer_norm_op<Eps>, X, G, B> layer_norm(X, G, B) {
  static_assert(Eps > 0, "layer_norm: eps must be positive");
  return {};
}

// ---- rms_norm

/// rms_norm's attributes (stored in its node's descriptor, read by its kernels).
struct rms_norm_attrs {
  double eps = 1e-6;
};

struct rms_norm_def : op_def<rms_norm_def, "rms_norm">, compiled_kernels<rms_norm_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr op_traits traits = row_norm_traits(&ops::rms_norm_saved, &ops::rms_norm_scratch);
  template <class X, class W>
  struct rule {
    static_assert(X::rank >= 1, "rms_norm: x needs at least one axis [.., D]");
    static_assert(norm_param_fits<X, W>, "rms_norm: w must be a vector [D] of x's last dim");
    using type = X;
  };
};
extern template struct compiled_kernels<rms_norm_def>;  // ops/rms_norm.cpp

template <double Eps>
using rms_norm_op = attributed<rms_norm_def, rms_norm_attrs{Eps}>;

/// RMSNorm over the last axis of x [.., D], scaled by w [D], with eps Eps (Llama's
/// `rms_norm_eps`: 1e-5 or 1e-6): y = x / √(mean(x²) + Eps) · w; shape unchanged.
template <double Eps, class X, class W>
constexpr node<rms_norm_op<Eps>, X, W> rms_norm(X, W) {
  static_assert(Eps > 0, "rms_norm: eps must be positive");
  return {};
}

}  // namespace loom

// Reflection of the attributes (descriptor slots, structural hash, DOT label).
BOOST_HANA_ADAPT_STRUCT(loom::layer_norm_attrs, eps);
BOOST_HANA_ADAPT_STRUCT(loom::rms_norm_attrs, eps);
