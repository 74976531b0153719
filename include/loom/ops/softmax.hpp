// softmax over the last axis, numerically stable.
//
//   y = exp(x − max) / Σ exp(x − max)             (a row that is all −∞ gives y = 0, not NaN)
//   backward: dx = y ⊙ (dy − Σ_j dy_j y_j)
#pragma once

#include "loom/core/node.hpp"

namespace loom {

struct softmax_op : op_def<softmax_op, "softmax", in_place_traits_reading_output>, compiled_kernels<softmax_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class S>
  using rule = axes_at_least<softmax_op, 1, S>;  // it works along the last axis
};
extern template struct compiled_kernels<softmax_op>;  // ops/softmax.cpp

/// Softmax over the last axis; shape unchanged.
inline constexpr op_fn<softmax_op> softmax{};

}  // namespace loom
