// scale: y = c · x for a compile-time constant c;  backward: dx = c · dy.
#pragma once

#include "loom/core/node.hpp"

namespace loom {

template <double C>
struct scale_op {
  static constexpr op_kind kind = op_kind::scale;
  template <class S>
  struct rule {
    using type = S;
  };
  static constexpr void describe(node_desc& d) { d.fattr[0] = C; }
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
