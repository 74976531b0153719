// Elementwise activations.
//
//   relu(x) = max(x, 0);         backward: dx = dy · [y > 0] = dy · [x > 0]   (0 at x = 0, as PyTorch)
//   gelu(x) = x · Φ(x) = x/2 · (1 + erf(x / √2))   (exact form: F.gelu's default)
//                                backward: dx = dy · (Φ(x) + x · φ(x)),  φ(x) = exp(−x²/2) / √(2π)
#pragma once

#include "loom/core/node.hpp"

namespace loom {

namespace ops {
template <class T>
struct relu_kernel {  // ops/activation.cpp
  static void forward(const op_args<T>& a);
  static void backward(const op_args<T>& a);
};
}  // namespace ops

inline constexpr op_entry relu_entry{
    .name = "relu",
    .id = 17,
    .f32 = kernels_of<ops::relu_kernel, float>(),
    .f64 = kernels_of<ops::relu_kernel, double>(),
    .writes_fresh = true,
    .can_run_in_place = true,
    .backward_in_place = true,
    .backward_reads_output = true,
};
LOOM_REGISTER_OP(relu_entry);

struct relu_op {
  static constexpr const op_entry& entry = relu_entry;
  template <class S>
  struct rule {
    using type = S;
  };
};

namespace ops {
template <class T>
struct gelu_kernel {  // ops/activation.cpp
  static void forward(const op_args<T>& a);
  static void backward(const op_args<T>& a);
};
}  // namespace ops

inline constexpr op_entry gelu_entry{
    .name = "gelu",
    .id = 18,
    .f32 = kernels_of<ops::gelu_kernel, float>(),
    .f64 = kernels_of<ops::gelu_kernel, double>(),
    .can_run_in_place = true,
    .backward_reads = reads({0}),
};
LOOM_REGISTER_OP(gelu_entry);

struct gelu_op {
  static constexpr const op_entry& entry = gelu_entry;
  template <class S>
  struct rule {
    using type = S;
  };
};

/// max(x, 0), elementwise; shape unchanged.
template <class X>
constexpr node<relu_op, X> relu(X) {
  return {};
}

/// x · Φ(x) (Φ the standard normal CDF, exact erf form), elementwise; shape unchanged.
template <class X>
constexpr node<gelu_op, X> gelu(X) {
  return {};
}

}  // namespace loom
