// softmax over the last axis, numerically stable.
//
//   y = exp(x − max) / Σ exp(x − max)             (a row that is all −∞ gives y = 0, not NaN)
//   backward: dx = y ⊙ (dy − Σ_j dy_j y_j)
#pragma once

#include "loom/core/node.hpp"

namespace loom {

struct softmax_op : op_def<softmax_op, "softmax", in_place_traits_reading_output> {
  template <class T> static void forward(const op_args<T>& a);  // ops/softmax.cpp
  template <class T> static void backward(const op_args<T>& a);
  template <class S>
  struct rule {
    static_assert(S::rank >= 1, "softmax: needs at least one axis");
    using type = S;
  };
};

/// Softmax over the last axis; shape unchanged.
inline constexpr op_fn<softmax_op> softmax{};

}  // namespace loom
