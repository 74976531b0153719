// gelu_tanh: GELU by its tanh approximation (GPT-2's `gelu_new`, PyTorch's
// F.gelu(approximate='tanh')), a pointwise op (pointwise.hpp). With k = √(2/π), c = 0.044715:
//
//   u = k · (x + c · x³),  t = tanh(u)
//   y = x/2 · (1 + t)
//   backward: dx = dy · (½ (1 + t) + x/2 · (1 − t²) · k · (1 + 3c · x²))
//
// Where t rounds to ±1 (large |x|) the second term is 0, and is taken as 0 also when x² is ∞:
// a huge x gets the slope 0 or 1, not NaN.
#pragma once

#include <cmath>

#include "loom/ops/pointwise.hpp"

namespace loom {

struct gelu_tanh_op : pointwise<gelu_tanh_op, pointwise_reads::input> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr std::string_view name = "gelu_tanh";
  static constexpr double sqrt_2_over_pi = 0.79788456080286535588;
  static constexpr double cubic = 0.044715;
  template <class T> static T f(T x) {
    const T t = std::tanh(T(sqrt_2_over_pi) * (x + T(cubic) * x * x * x));
    return T(0.5) * x * (T(1) + t);
  }
  template <class T> static T df(T x, T) {
    const T t = std::tanh(T(sqrt_2_over_pi) * (x + T(cubic) * x * x * x));
    const T sech2 = T(1) - t * t;
    const T slope = T(0.5) * x * sech2 * T(sqrt_2_over_pi) * (T(1) + T(3 * cubic) * x * x);
    return T(0.5) * (T(1) + t) + (sech2 == T(0) ? T(0) : slope);
  }
};

/// GELU's tanh approximation x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³))), elementwise (GPT-2's
/// activation); shape unchanged.
inline constexpr op_fn<gelu_tanh_op> gelu_tanh{};

// compiled once, in ops/gelu_tanh.cpp
extern template struct pointwise<gelu_tanh_op, pointwise_reads::input>;

}  // namespace loom
