// softmax over the last axis, numerically stable.
//
//   y = exp(x − max) / Σ exp(x − max)             (a row that is all −∞ gives y = 0, not NaN)
//   backward: dx = y ⊙ (dy − Σ_j dy_j y_j)
#pragma once

#include "loom/core/node.hpp"

namespace loom {

struct softmax_op {
  static constexpr op_kind kind = op_kind::softmax;
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
