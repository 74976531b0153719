// softmax over the last axis, numerically stable.
//
//   y = exp(x − max) / Σ exp(x − max)             (a row that is all −∞ gives y = 0, not NaN)
//   backward: dx = y ⊙ (dy − Σ_j dy_j y_j)
#pragma once

#include "loom/core/node.hpp"

namespace loom {

namespace ops {
template <class T>
struct softmax_kernel {  // ops/softmax.cpp
  static void forward(const op_args<T>& a);
  static void backward(const op_args<T>& a);
};
}  // namespace ops

inline constexpr op_entry softmax_entry{
    .name = "softmax",
    .id = 7,
    .f32 = kernels_of<ops::softmax_kernel, float>(),
    .f64 = kernels_of<ops::softmax_kernel, double>(),
    .writes_fresh = true,
    .can_run_in_place = true,
    .backward_in_place = true,
    .backward_reads_output = true,
};
LOOM_REGISTER_OP(softmax_entry);

struct softmax_op {
  static constexpr const op_entry& entry = softmax_entry;
  template <class S>
  struct rule {
    static_assert(S::rank >= 1, "softmax: needs at least one axis");
    using type = S;
  };
};

/// Softmax over the last axis; shape unchanged.
template <class X>
constexpr node<softmax_op, X> softmax(X) {
  return {};
}

}  // namespace loom
