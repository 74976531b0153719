// Reductions over one axis (negative Axis counts from the end). x [.., N, ..] → the same
// without axis Axis, or with it set to 1 when KeepDim (PyTorch's keepdim=True).
//
//   reduce_sum<Axis>(x) = Σ_k x_k         backward: dx_k = dy
//   mean<Axis>(x)       = Σ_k x_k / N     backward: dx_k = dy / N    (N = 0: NaN, as PyTorch)
//   amax<Axis>(x)       = max_k x_k       backward: dx_k = dy · [x_k = y] / #{j : x_j = y}
//                                         (ties share dy evenly, as torch.amax)
//
// N is the axis' size when the graph runs (fixed or named). The sum over the axis runs in
// order k = 0, 1, .. for every output element, whatever the number of threads. (sum(x), in
// add.hpp, sums every element into a scalar.)
#pragma once

#include <type_traits>

#include "loom/core/node.hpp"

namespace loom {

/// True when Axis names an axis of a rank-R shape (−R ≤ Axis < R).
template <int Axis, int R>
inline constexpr bool axis_in_range = Axis >= -R && Axis < R;

namespace detail {
template <class S, int Axis, bool KeepDim, bool InRange = (Axis >= 0 && Axis < S::rank)>
struct reduced_shape_impl {
  using type = S;  // out of range: the rule's static_assert says so
};
template <class S, int Axis, bool KeepDim>
struct reduced_shape_impl<S, Axis, KeepDim, true> {
  using type = std::conditional_t<KeepDim, shape_set<S, Axis, fix<1>>,
                                  shape_cat<shape_head<S, Axis>, shape_tail<S, Axis + 1>>>;
};
}  // namespace detail

/// S reduced over Axis (negative: from the end): without that axis, or with it fix<1> when
/// KeepDim.
template <class S, int Axis, bool KeepDim>
using reduced_shape = typename detail::reduced_shape_impl<S, norm_axis<Axis, S::rank>, KeepDim>::type;

/// The reductions' attribute: the axis as written (negative counts from the end).
struct reduce_attrs {
  long axis = 0;
};

/// True when Axis names an axis of x (rank R) for the reduction Def: axis_in_range under a name
/// that also names the op in a failed check ("reduces_an_axis<loom::mean_def, 2, 2>").
template <class Def, int Axis, int R>
inline constexpr bool reduces_an_axis = axis_in_range<Axis, R>;

/// The node op of a reduction over one axis: Def (its name, traits and kernels) with the axis as
/// its attribute and the reduced shape as its rule.
template <class Def, int Axis, bool KeepDim>
struct axis_reduction : Def {
  static constexpr reduce_attrs attrs{Axis};
  template <class S>
  struct rule {
    static_assert(reduces_an_axis<Def, Axis, S::rank>, "reduction: Axis is not an axis of x (−rank ≤ Axis < rank)");
    using type = reduced_shape<S, Axis, KeepDim>;
  };
};

struct reduce_sum_def : op_def<reduce_sum_def, "reduce_sum", op_traits{.writes_fresh = true}>,
                        compiled_kernels<reduce_sum_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
struct mean_def : op_def<mean_def, "mean", op_traits{.writes_fresh = true}>, compiled_kernels<mean_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
struct amax_def : op_def<amax_def, "amax",
                         op_traits{.writes_fresh = true, .backward_reads = reads({0}), .backward_reads_output = true}>,
                  compiled_kernels<amax_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  /// Throws shape_error when the axis has size 0 (a max over nothing).
  template <class T> static void check(const op_args<T>& a);
};
extern template struct compiled_kernels<reduce_sum_def>;  // ops/reduction.cpp
extern template struct compiled_kernels<mean_def>;
extern template struct compiled_kernels<amax_def>;

/// Σ over axis Axis of x (negative: from the end): x without that axis, or with it 1 when
/// KeepDim. (sum(x) adds every element into a scalar.)
template <int Axis, bool KeepDim = false, class X>
  requires is_node<X>
constexpr node<axis_reduction<reduce_sum_def, Axis, KeepDim>, X> reduce_sum(X) {
  return {};
}

/// The mean over axis Axis of x (negative: from the end), dividing by the axis' size when the
/// graph runs: x without that axis, or with it 1 when KeepDim (RMSNorm: mean<-1, true>(x * x)).
template <int Axis, bool KeepDim = false, class X>
  requires is_node<X>
constexpr node<axis_reduction<mean_def, Axis, KeepDim>, X> mean(X) {
  return {};
}

/// The largest element along axis Axis of x (torch.amax; negative Axis from the end): x
/// without that axis, or with it 1 when KeepDim. Tied maxima share the gradient evenly; NaN
/// propagates. Throws shape_error when the axis has size 0.
template <int Axis, bool KeepDim = false, class X>
  requires is_node<X>
constexpr node<axis_reduction<amax_def, Axis, KeepDim>, X> amax(X) {
  return {};
}

}  // namespace loom

// Reflection of the attributes (descriptor slots, structural hash, DOT label).
BOOST_HANA_ADAPT_STRUCT(loom::reduce_attrs, axis);
