// silu (swish): x · σ(x), elementwise (PyTorch's F.silu; the gate of SwiGLU feed-forwards).
//
//   y = x · σ(x),  σ(x) = 1 / (1 + e^(−x))
//   backward: dx = dy · σ(x) · (1 + x · (1 − σ(x)))
#pragma once

#include "loom/core/node.hpp"

namespace loom {

struct silu_op : op_def<silu_op, "silu", in_place_traits_reading(reads({0}))>, compiled_kernels<silu_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
extern template struct compiled_kernels<silu_op>;  // ops/silu.cpp

/// x · sigmoid(x), elementwise; same shape as x.
inline constexpr op_fn<silu_op> silu{};

}  // namespace loom
