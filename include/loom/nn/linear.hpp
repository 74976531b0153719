// nn::linear: y = x Wᵀ + b, PyTorch nn.Linear's layout (W stored [out, in]).
#pragma once

#include "loom/core/node.hpp"
#include "loom/ops/add.hpp"
#include "loom/ops/matmul.hpp"

namespace loom::nn {

/// y = x · Wᵀ + b over the last axis: x [.., In] -> y [.., Out]. Parameters `Prefix.weight`
/// [Out, In] and `Prefix.bias` [Out], initialised like nn.Linear.
template <fixed_string Prefix, long Out, bool Bias = true, class X>
constexpr auto linear(X x) {
  using in_dim = dim_at<typename X::shape, -1>;
  static_assert(is_fixed_dim<in_dim>, "nn::linear: the input's last dim In must be fixed (named below)");
  if constexpr (!is_fixed_dim<in_dim>) {
    return x;  // said above; nothing more is built
  } else {
    auto w = param<Prefix + ".weight", shape<fix<Out>, in_dim>, init<init_kind::linear_weight>>();
    if constexpr (Bias) {
      auto b = param<Prefix + ".bias", shape<fix<Out>>, init<init_kind::linear_bias, in_dim::value>>();
      return add(matmul<false, true>(x, w), b);
    } else {
      return matmul<false, true>(x, w);
    }
  }
}

}  // namespace loom::nn
