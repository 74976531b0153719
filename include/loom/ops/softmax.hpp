// softmax over the last axis, numerically stable.
//
//   y = exp(x − max) / Σ exp(x − max)             (a row that is all −∞ gives y = 0, not NaN)
//   backward: dx = y ⊙ (dy − Σ_j dy_j y_j)
#pragma once

#include "loom/core/node.hpp"

namespace loom {

struct softmax_op : op_def<softmax_op> {
  static constexpr std::string_view name = "softmax";
  static constexpr op_traits traits{
      .writes_fresh = true,
      .can_run_in_place = true,
      .backward_in_place = true,
      .backward_reads_output = true,
  };
  template <class T>
  static void forward(const op_args<T>& a);  // ops/softmax.cpp
  template <class T>
  static void backward(const op_args<T>& a);
  template <class S>
  struct rule {
    static_assert(S::rank >= 1, "softmax: needs at least one axis");
    using type = S;
  };
};

/// Softmax over the last axis; shape unchanged.
inline constexpr op_fn<softmax_op> softmax{};

}  // namespace loom
