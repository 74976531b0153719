// Elementwise activations.
//
//   relu(x) = max(x, 0);         backward: dx = dy · [y > 0] = dy · [x > 0]   (0 at x = 0, as PyTorch)
//   gelu(x) = x · Φ(x) = x/2 · (1 + erf(x / √2))   (exact form: F.gelu's default)
//                                backward: dx = dy · (Φ(x) + x · φ(x)),  φ(x) = exp(−x²/2) / √(2π)
#pragma once

#include "loom/core/node.hpp"

namespace loom {

struct relu_op : op_def<relu_op, "relu", in_place_traits_reading_output>, compiled_kernels<relu_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
extern template struct compiled_kernels<relu_op>;  // ops/activation.cpp

struct gelu_op : op_def<gelu_op, "gelu", op_traits{.can_run_in_place = true, .backward_reads = reads({0})}>,
                 compiled_kernels<gelu_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
extern template struct compiled_kernels<gelu_op>;  // ops/activation.cpp

/// max(x, 0), elementwise; shape unchanged.
inline constexpr op_fn<relu_op> relu{};

/// x · Φ(x) (Φ the standard normal CDF, exact erf form), elementwise; shape unchanged.
inline constexpr op_fn<gelu_op> gelu{};

}  // namespace loom
