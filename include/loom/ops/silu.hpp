// silu (swish): x · σ(x), elementwise (PyTorch's F.silu; the gate of SwiGLU feed-forwards).
//
//   y = x · σ(x),  σ(x) = 1 / (1 + e^(−x))
//   backward: dx = dy · σ(x) · (1 + x · (1 − σ(x)))
#pragma once

#include "loom/core/node.hpp"

namespace loom {

namespace ops {
template <class T>
struct silu_kernel {  // ops/silu.cpp
  static void forward(const op_args<T>& a);
  static void backward(const op_args<T>& a);
};
}  // namespace ops

inline constexpr op_entry silu_entry{
    .name = "silu",
    .id = 22,
    .f32 = kernels_of<ops::silu_kernel, float>(),
    .f64 = kernels_of<ops::silu_kernel, double>(),
    .writes_fresh = true,
    .can_run_in_place = true,
    .backward_in_place = true,
    .backward_reads = reads({0}),
};
LOOM_REGISTER_OP(silu_entry);

struct silu_op {
  static constexpr const op_entry& entry = silu_entry;
  template <class S>
  struct rule {
    using type = S;
  };
};

/// x · sigmoid(x), elementwise; same shape as x.
template <class X>
constexpr node<silu_op, X> silu(X) {
  return {};
}

}  // namespace loom
