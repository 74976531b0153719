// Elementwise activations.
//
//   relu(x) = max(x, 0);         backward: dx = dy · [x > 0]   (0 at x = 0, as PyTorch)
//   gelu(x) = x · Φ(x) = x/2 · (1 + erf(x / √2))   (exact form: F.gelu's default)
//                                backward: dx = dy · (Φ(x) + x · φ(x)),  φ(x) = exp(−x²/2) / √(2π)
#pragma once

#include "loom/core/node.hpp"

namespace loom {

struct relu_op {
  static constexpr op_kind kind = op_kind::relu;
  template <class S>
  struct rule {
    using type = S;
  };
};

struct gelu_op {
  static constexpr op_kind kind = op_kind::gelu;
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
