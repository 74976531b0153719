// Attention, built from primitives: scaled dot-product attention and multi-head attention.
//
//   attention(q, k, v, masks...) = softmax(mask(q kᵀ / √d_k)) v
//       q [.., T, d_k], k [.., S, d_k], v [.., S, d_v] -> [.., T, d_v]
//   self_attention<Prefix, H>(x, masks...), cross_attention<Prefix, H>(x, memory, masks...):
//       multi-head attention with PyTorch nn.MultiheadAttention's parameters (batch_first):
//         Prefix.in_proj_weight [3D, D] (rows: q, k, v), Prefix.in_proj_bias [3D],
//         Prefix.out_proj.weight [D, D], Prefix.out_proj.bias [D].
//       x [B, T, D], memory [B, S, D] -> [B, T, D]. Heads are split by reshape + transpose
//       ([B, T, H·d_k] -> [B, H, T, d_k]) and concatenated back the same way before out_proj.
//
// Masks are a small set of specs applied in order: nn::causal, nn::padding(valid_len),
// nn::allowed(bool_mask). Building the same expression twice gives the same node, so
// attention_weights(...) called with the same arguments names the weights inside attention().
#pragma once

#include <boost/hana/fold_left.hpp>
#include <boost/hana/tuple.hpp>

#include "loom/core/node.hpp"
#include "loom/nn/linear.hpp"
#include "loom/ops.hpp"

namespace loom::nn {

/// Causal mask: query i sees keys j ≤ i + (S − T) (the cache length when decoding).
struct causal_t {};
inline constexpr causal_t causal{};

/// Padding mask from per-sequence key lengths, an int input [B].
template <class Len>
struct padding_t {};
template <class Len>
constexpr padding_t<Len> padding(Len) {
  return {};
}

/// Left-padding mask: keys j < first[b] are hidden (prompts aligned right); first: int [B].
template <class First>
struct left_padding_t {};
template <class First>
constexpr left_padding_t<First> left_padding(First) {
  return {};
}

/// Explicit boolean mask (True may attend), broadcast onto the scores [.., T, S].
template <class Mask>
struct allowed_t {};
template <class Mask>
constexpr allowed_t<Mask> allowed(Mask) {
  return {};
}

namespace detail {
template <class S>
constexpr auto apply_mask(S s, causal_t) {
  return mask_causal(s);
}
template <class S, class L>
constexpr auto apply_mask(S s, padding_t<L>) {
  return mask_padding(s, L{});
}
template <class S, class F>
constexpr auto apply_mask(S s, left_padding_t<F>) {
  return mask_left_padding(s, F{});
}
template <class S, class M>
constexpr auto apply_mask(S s, allowed_t<M>) {
  return mask_bool(s, M{});
}
}  // namespace detail

/// softmax(mask(q kᵀ / √d_k)): q [.., T, d_k], k [.., S, d_k] -> weights [.., T, S].
template <class Q, class K, class... M>
constexpr auto attention_weights(Q q, K k, M... masks) {
  constexpr long dk = dim_at<typename Q::shape, -1>::value;
  auto scores = scale<inv_sqrt<dk>>(matmul<false, true>(q, k));  // [.., T, S]
  auto masked = boost::hana::fold_left(boost::hana::make_tuple(masks...), scores,
                                       [](auto s, auto m) { return detail::apply_mask(s, m); });
  return softmax(masked);
}

/// Scaled dot-product attention: softmax(mask(q kᵀ / √d_k)) v -> [.., T, d_v].
template <class Q, class K, class V, class... M>
constexpr auto attention(Q q, K k, V v, M... masks) {
  return matmul(attention_weights(q, k, masks...), v);
}

namespace detail {

/// Checks (with readable static_asserts) that x is [B, T, D] with D divisible by H.
template <class X, int H>
constexpr bool heads_fit() {
  using S = typename X::shape;
  static_assert(S::rank == 3, "multi-head attention: inputs must be [B, T, D]");
  if constexpr (S::rank == 3) {
    static_assert(is_fixed_dim<dim_at<S, 2>>, "multi-head attention: the model dim D must be fixed");
    if constexpr (is_fixed_dim<dim_at<S, 2>>) {
      static_assert(dim_at<S, 2>::value % H == 0,
                    "multi-head attention: the model dim must be divisible by the number of heads");
      return dim_at<S, 2>::value % H == 0;
    }
  }
  return false;
}

/// [B, T, H·d_k] -> [B, H, T, d_k]
template <int H, class X>
constexpr auto split_heads(X x) {
  using S = typename X::shape;
  constexpr long d = dim_at<S, 2>::value;
  return transpose<0, 2, 1, 3>(reshape<shape<dim_at<S, 0>, dim_at<S, 1>, fix<H>, fix<d / H>>>(x));
}

/// [B, H, T, d_k] -> [B, T, H·d_k]: the heads concatenated along the features.
template <class X>
constexpr auto merge_heads(X x) {
  using S = typename X::shape;
  constexpr long d = dim_at<S, 1>::value * dim_at<S, 3>::value;
  return reshape<shape<dim_at<S, 0>, dim_at<S, 2>, fix<d>>>(transpose<0, 2, 1, 3>(x));
}

template <fixed_string Prefix, long D>
constexpr auto in_proj_weight() {
  return param<Prefix + ".in_proj_weight", shape<fix<3 * D>, fix<D>>, init<init_kind::xavier_uniform>>();
}
template <fixed_string Prefix, long D>
constexpr auto in_proj_bias() {
  return param<Prefix + ".in_proj_bias", shape<fix<3 * D>>>();
}

/// Projections q, k, v for self-attention: one GEMM with the packed weight.
template <fixed_string Prefix, class X>
constexpr auto self_qkv(X x) {
  constexpr long d = dim_at<typename X::shape, -1>::value;
  auto qkv = add(matmul<false, true>(x, in_proj_weight<Prefix, d>()), in_proj_bias<Prefix, d>());  // [B, T, 3D]
  return split<-1, 3>(qkv);
}

/// Query from x, keys and values from memory: rows [0, D) and [D, 3D) of the packed weight.
template <fixed_string Prefix, class X, class Mem>
constexpr auto cross_qkv(X x, Mem mem) {
  constexpr long d = dim_at<typename X::shape, -1>::value;
  static_assert(dim_at<typename Mem::shape, -1>::value == d,
                "cross-attention: memory must have the model dim of the queries");
  auto w = in_proj_weight<Prefix, d>();
  auto b = in_proj_bias<Prefix, d>();
  auto q = add(matmul<false, true>(x, slice<0, fix<0>, fix<d>>(w)), slice<0, fix<0>, fix<d>>(b));  // [B, T, D]
  auto kv = add(matmul<false, true>(mem, slice<0, fix<d>, fix<2 * d>>(w)),
                slice<0, fix<d>, fix<2 * d>>(b));  // [B, S, 2D]
  auto [k, v] = split<-1, 2>(kv);
  return std::make_tuple(q, k, v);
}

template <fixed_string Prefix, int H, class Q, class K, class V, class... M>
constexpr auto heads_attention(Q q, K k, V v, M... masks) {
  constexpr long d = dim_at<typename Q::shape, -1>::value;
  auto o = attention(split_heads<H>(q), split_heads<H>(k), split_heads<H>(v), masks...);  // [B, H, T, d_k]
  return linear<Prefix + ".out_proj", d>(merge_heads(o));
}

template <fixed_string Prefix, int H, class... M>
struct self_attention_fn {
  template <class X>
  constexpr auto operator()(X x) const {
    auto [q, k, v] = self_qkv<Prefix>(x);
    return heads_attention<Prefix, H>(q, k, v, M{}...);
  }
};

template <fixed_string Prefix, int H, class... M>
struct cross_attention_fn {
  template <class X, class Mem>
  constexpr auto operator()(X x, Mem mem) const {
    auto [q, k, v] = cross_qkv<Prefix>(x, mem);
    return heads_attention<Prefix, H>(q, k, v, M{}...);
  }
};

}  // namespace detail

/// Multi-head self-attention over x [B, T, D] with H heads -> [B, T, D]; parameters under
/// Prefix as in nn.MultiheadAttention. Masks: nn::causal, nn::padding(len), nn::allowed(m).
template <fixed_string Prefix, int H, class X, class... M>
constexpr auto self_attention(X x, M...) {
  if constexpr (detail::heads_fit<X, H>()) return block<detail::self_attention_fn<Prefix, H, M...>, X>{};
  else return x;  // the static_assert in heads_fit has said what is wrong
}

/// Multi-head cross-attention: queries from x [B, T, D], keys and values from memory
/// [B, S, D] -> [B, T, D]. Masks apply to the scores [B, H, T, S].
template <fixed_string Prefix, int H, class X, class Mem, class... M>
constexpr auto cross_attention(X x, Mem, M...) {
  if constexpr (detail::heads_fit<X, H>() && detail::heads_fit<Mem, H>())
    return block<detail::cross_attention_fn<Prefix, H, M...>, X, Mem>{};
  else return x;
}

/// The attention weights [B, H, T, S] inside self_attention<Prefix, H>(x, masks...): the
/// same nodes, so executor::value() reads them after a forward of a graph using that layer.
template <fixed_string Prefix, int H, class X, class... M>
constexpr auto self_attention_weights(X x, M... masks) {
  auto [q, k, v] = detail::self_qkv<Prefix>(x);
  (void)v;
  return attention_weights(detail::split_heads<H>(q), detail::split_heads<H>(k), masks...);
}

/// The attention weights [B, H, T, S] inside cross_attention<Prefix, H>(x, memory, masks...).
template <fixed_string Prefix, int H, class X, class Mem, class... M>
constexpr auto cross_attention_weights(X x, Mem mem, M... masks) {
  auto [q, k, v] = detail::cross_qkv<Prefix>(x, mem);
  (void)v;
  return attention_weights(detail::split_heads<H>(q), detail::split_heads<H>(k), masks...);
}

}  // namespace loom::nn
