// scale: y = c · x for a compile-time constant c;  backward: dx = c · dy.
#pragma once

#include <tuple>

#include "loom/core/node.hpp"

namespace loom {

namespace ops {
template <class T>
struct scale_kernel {  // ops/scale.cpp
  static void forward(const op_args<T>& a);
  static void backward(const op_args<T>& a);
};
}  // namespace ops

/// scale's attributes (stored in its node's descriptor, read by its kernels).
struct scale_attrs {
  double factor = 1;
  constexpr auto fields() { return std::tie(factor); }
};

inline constexpr op_entry scale_entry{
    .name = "scale",
    .id = 3,
    .f32 = kernels_of<ops::scale_kernel, float>(),
    .f64 = kernels_of<ops::scale_kernel, double>(),
    .writes_fresh = true,
    .can_run_in_place = true,
    .backward_in_place = true,
};
LOOM_REGISTER_OP(scale_entry);

template <double C>
struct scale_op {
  static constexpr const op_entry& entry = scale_entry;
  static constexpr scale_attrs attrs{C};
  template <class S>
  struct rule {
    using type = S;
  };
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
