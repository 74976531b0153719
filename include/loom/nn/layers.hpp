// Transformer building blocks with parameters named as in PyTorch's modules.
//
//   embedding<Prefix, V, D>(tokens):     tokens [.., T] (int) -> [.., T, D]; Prefix.weight [V, D]
//                                        ~ N(0, 1) (nn.Embedding)
//   layer_norm<Prefix, Eps>(x):          x [.., D] -> [.., D]; Prefix.weight [D] = 1,
//                                        Prefix.bias [D] = 0 (nn.LayerNorm)
//   feed_forward<Prefix, FF, Act>(x):    x [.., D] -> linear2(act(linear1(x))) [.., D], with
//                                        Prefix.linear1.{weight [FF, D], bias [FF]} and
//                                        Prefix.linear2.{weight [D, FF], bias [D]}
//                                        (nn.TransformerEncoderLayer's names); the overload
//                                        with a seed applies dropout<P> after the activation.
#pragma once

#include "loom/core/node.hpp"
#include "loom/nn/linear.hpp"
#include "loom/ops/activation.hpp"
#include "loom/ops/dropout.hpp"
#include "loom/ops/embedding.hpp"
#include "loom/ops/norm.hpp"

namespace loom::nn {

/// The feed-forward activation: relu_t (nn.Transformer's default) or gelu_t (exact GELU).
struct relu_t {
  template <class X>
  static constexpr auto apply(X x) {
    return loom::relu(x);
  }
};
struct gelu_t {
  template <class X>
  static constexpr auto apply(X x) {
    return loom::gelu(x);
  }
};

/// Token embedding: tokens [.., T] (an int node) -> [.., T, D] with the table Prefix.weight
/// [Vocab, D], initialised N(0, 1) like nn.Embedding. Throws value_error (at forward) for
/// an id outside [0, Vocab).
template <fixed_string Prefix, long Vocab, long D, class Tok>
constexpr auto embedding(Tok tokens) {
  auto weight = param<Prefix + ".weight", shape<fix<Vocab>, fix<D>>, init<init_kind::normal>>();
  return loom::embedding(tokens, weight);
}

/// LayerNorm over the last axis of x [.., D] (D fixed) with Prefix.weight [D] (ones) and
/// Prefix.bias [D] (zeros), as nn.LayerNorm(D, eps=Eps).
template <fixed_string Prefix, double Eps = 1e-5, class X>
constexpr auto layer_norm(X x) {
  using model_dim = dim_at<typename X::shape, -1>;
  static_assert(is_fixed_dim<model_dim>, "nn::layer_norm: the normalised (last) dim must be fixed");
  auto weight = param<Prefix + ".weight", shape<model_dim>, init<init_kind::ones>>();
  auto bias = param<Prefix + ".bias", shape<model_dim>, init<init_kind::zeros>>();
  return loom::layer_norm<Eps>(x, weight, bias);
}

namespace detail {

template <class X>
constexpr long model_dim_of() {
  return dim_at<typename X::shape, -1>::value;
}

/// Checks feed_forward's activation and input before its block is built, so that a mistake is
/// one static_assert (the caller builds nothing after a failed check).
template <class Act, class X>
constexpr bool feed_forward_fits() {
  if constexpr (!(std::is_same_v<Act, relu_t> || std::is_same_v<Act, gelu_t>)) {
    static_assert(std::is_same_v<Act, relu_t> || std::is_same_v<Act, gelu_t>,
                  "nn::feed_forward: Act must be nn::relu_t or nn::gelu_t");
    return false;
  } else {
    static_assert(is_fixed_dim<dim_at<typename X::shape, -1>>, "nn::feed_forward: the model (last) dim must be fixed");
    return is_fixed_dim<dim_at<typename X::shape, -1>>;
  }
}

template <fixed_string Prefix, long FF, class Act>
struct feed_forward_fn {
  template <class X>
  constexpr auto operator()(X x) const {
    auto hidden = Act::apply(linear<Prefix + ".linear1", FF>(x));  // [.., FF]
    return linear<Prefix + ".linear2", model_dim_of<X>()>(hidden);
  }
};

template <fixed_string Prefix, long FF, class Act, double P>
struct feed_forward_dropout_fn {
  template <class X, class Seed>
  constexpr auto operator()(X x, Seed seed) const {
    auto hidden = dropout<P>(Act::apply(linear<Prefix + ".linear1", FF>(x)), seed);  // [.., FF]
    return linear<Prefix + ".linear2", model_dim_of<X>()>(hidden);
  }
};

}  // namespace detail

/// Position-wise feed-forward: linear2(act(linear1(x))), x [.., D] -> [.., D], hidden width FF.
template <fixed_string Prefix, long FF, class Act = relu_t, class X>
constexpr auto feed_forward(X x) {
  if constexpr (detail::feed_forward_fits<Act, X>()) return block<detail::feed_forward_fn<Prefix, FF, Act>, X>{};
  else return x;  // the check has said what is wrong
}

/// linear2(dropout<P>(act(linear1(x)), seed)), as nn.TransformerEncoderLayer's feed-forward;
/// seed is an int node [2] (see dropout). Dropout is active only in training.
template <fixed_string Prefix, long FF, class Act, double P, class X, class Seed>
constexpr auto feed_forward(X x, Seed) {
  if constexpr (detail::feed_forward_fits<Act, X>())
    return block<detail::feed_forward_dropout_fn<Prefix, FF, Act, P>, X, Seed>{};
  else return x;  // the check has said what is wrong
}

}  // namespace loom::nn
