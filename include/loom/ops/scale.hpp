// scale: y = c · x for a compile-time constant c;  backward: dx = c · dy.
#pragma once

#include <tuple>

#include "loom/core/node.hpp"

namespace loom {

/// scale's attributes (stored in its node's descriptor, read by its kernels).
struct scale_attrs {
  double factor = 1;
};

/// scale's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct scale_def : op_def<scale_def, "scale", in_place_traits>, compiled_kernels<scale_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
extern template struct compiled_kernels<scale_def>;  // ops/scale.cpp

/// scale<C>(x): x's shape (op_def's default rule), C stored as the attribute.
template <double C>
struct scale_op : scale_def {
  static constexpr scale_attrs attrs{C};
};

/// y = C · x, elementwise; the shape is unchanged.
template <double C, class X>
constexpr node<scale_op<C>, X> scale(X) {
  return {};
}

namespace detail {
constexpr double sqrt_newton(double x) {
  if (x <= 0) return 0;
  double r = x > 1 ? x : 1;
  for (int i = 0; i < 100; ++i) r = 0.5 * (r + x / r);
  return r;
}
}  // namespace detail

/// 1/√n at compile time (the attention scale for d_k = n).
template <long N>
inline constexpr double inv_sqrt = 1.0 / detail::sqrt_newton(static_cast<double>(N));

}  // namespace loom

// Reflection of the attributes (descriptor slots, structural hash, DOT label).
BOOST_HANA_ADAPT_STRUCT(loom::scale_attrs, factor);
