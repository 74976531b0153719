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

/// The names a decoding layer's state goes by, made here only (at compile time; at run time
/// nn::kv_cache and the feeds read them from the graph): the cached keys and values of
/// self-attention layer `Layer` (inputs and outputs of the decoding graph, see cache_state)
/// and the projected memory of cross-attention layer `Layer` (outputs of the memory graph,
/// inputs of the decoding graph).
template <fixed_string Layer>
inline constexpr auto cache_k_name = Layer + ".cache_k";
template <fixed_string Layer>
inline constexpr auto cache_v_name = Layer + ".cache_v";
template <fixed_string Layer>
inline constexpr auto memory_k_name = Layer + ".memory_k";
template <fixed_string Layer>
inline constexpr auto memory_v_name = Layer + ".memory_v";

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

/// Query of cross-attention: rows [0, D) of the packed weight. x [B, T, D] -> [B, T, D].
template <fixed_string Prefix, class X>
constexpr auto cross_q(X x) {
  constexpr long d = dim_at<typename X::shape, -1>::value;
  return add(matmul<false, true>(x, slice<0, fix<0>, fix<d>>(in_proj_weight<Prefix, d>())),
             slice<0, fix<0>, fix<d>>(in_proj_bias<Prefix, d>()));
}

/// Keys and values of cross-attention, heads split: rows [D, 3D) of the packed weight.
/// memory [B, S, D] -> ([B, H, S, d_k], [B, H, S, d_k]).
template <fixed_string Prefix, int H, class Mem>
constexpr auto cross_kv_heads(Mem mem) {
  constexpr long d = dim_at<typename Mem::shape, -1>::value;
  auto kv = add(matmul<false, true>(mem, slice<0, fix<d>, fix<2 * d>>(in_proj_weight<Prefix, d>())),
                slice<0, fix<d>, fix<2 * d>>(in_proj_bias<Prefix, d>()));  // [B, S, 2D]
  auto [k, v] = split<-1, 2>(kv);
  return std::make_tuple(split_heads<H>(k), split_heads<H>(v));
}

/// Attention over heads already split ([B, H, T, d_k] and [B, H, S, d_k]), merged back and
/// projected by out_proj: [B, T, D].
template <fixed_string Prefix, class QH, class KH, class VH, class... M>
constexpr auto heads_attention(QH qh, KH kh, VH vh, M... masks) {
  constexpr long d = dim_at<typename QH::shape, 1>::value * dim_at<typename QH::shape, 3>::value;
  return linear<Prefix + ".out_proj", d>(merge_heads(attention(qh, kh, vh, masks...)));
}

/// The cached keys or values of a layer, fed at each decoding step: [B, H, P, d_k], where P
/// (the dim "P") is the number of cached positions.
template <fixed_string Name, class X, int H>
constexpr auto cache_input() {
  using S = typename X::shape;
  return input<Name, shape<dim_at<S, 0>, fix<H>, dyn<"P">, fix<dim_at<S, 2>::value / H>>>();
}

/// A layer's keys (or values) after a step: the cached ones, the input `Name` [B, H, P, d_k],
/// followed by the step's new rows [B, H, T, d_k], as the output `Name` [B, H, P + T, d_k] — a
/// state of the decoding graph (an input and an output of one name, see named.hpp) that
/// nn::kv_cache feeds and reads back. Fed with room (feed::with_room), the concat writes the
/// new rows straight into the cache's storage.
template <fixed_string Name, int H, class X, class Rows>
constexpr auto cache_state(Rows rows) {
  return named<Name>(concat<2>(cache_input<Name, X, H>(), rows));
}

/// Projected encoder memory for cached cross-attention: [B, H, S, d_k].
template <fixed_string Name, class X, int H>
constexpr auto memory_input() {
  using S = typename X::shape;
  return input<Name, shape<dim_at<S, 0>, fix<H>, dyn<"S">, fix<dim_at<S, 2>::value / H>>>();
}

template <fixed_string Prefix, int H, class... M>
struct self_attention_fn {
  template <class X>
  constexpr auto operator()(X x) const {
    auto [q, k, v] = self_qkv<Prefix>(x);
    return heads_attention<Prefix>(split_heads<H>(q), split_heads<H>(k), split_heads<H>(v), M{}...);
  }
};

/// The same layer when decoding: keys and values are the cached ones followed by the new
/// ones, K = concat<time>(cache_k, k_new); masks see S = P + T keys (causal is offset by P).
template <fixed_string Prefix, int H, class... M>
struct self_attention_cached_fn {
  template <class X>
  constexpr auto operator()(X x) const {
    auto [q, k, v] = self_qkv<Prefix>(x);
    auto keys = cache_state<cache_k_name<Prefix>, H, X>(split_heads<H>(k));    // [B, H, P + T, d_k]
    auto values = cache_state<cache_v_name<Prefix>, H, X>(split_heads<H>(v));  // [B, H, P + T, d_k]
    return heads_attention<Prefix>(split_heads<H>(q), keys, values, M{}...);
  }
};

template <fixed_string Prefix, int H, class... M>
struct cross_attention_fn {
  template <class X, class Mem>
  constexpr auto operator()(X x, Mem mem) const {
    static_assert(dim_at<typename Mem::shape, -1>::value == dim_at<typename X::shape, -1>::value,
                  "cross-attention: memory must have the model dim of the queries");
    auto [kh, vh] = cross_kv_heads<Prefix, H>(mem);
    return heads_attention<Prefix>(split_heads<H>(cross_q<Prefix>(x)), kh, vh, M{}...);
  }
};

/// Cross-attention against memory projected once per source (memory_k, memory_v inputs).
template <fixed_string Prefix, int H, class... M>
struct cross_attention_cached_fn {
  template <class X>
  constexpr auto operator()(X x) const {
    return heads_attention<Prefix>(split_heads<H>(cross_q<Prefix>(x)), memory_input<memory_k_name<Prefix>, X, H>(),
                                   memory_input<memory_v_name<Prefix>, X, H>(), M{}...);
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

/// Multi-head self-attention over the new positions x [B, T, D] when decoding with a KV
/// cache: the layer's cached keys and values enter as the inputs `Prefix.cache_k` and
/// `Prefix.cache_v` [B, H, P, d_k]; keys are concat<time>(cache_k, k_new) and nn::causal is
/// offset by P. Same parameters and same functions as self_attention: prefill (P = 0, T =
/// prompt), chunked prefill and one-token decode (T = 1) are all this one graph.
template <fixed_string Prefix, int H, class X, class... M>
constexpr auto self_attention_cached(X x, M...) {
  if constexpr (detail::heads_fit<X, H>()) return block<detail::self_attention_cached_fn<Prefix, H, M...>, X>{};
  else return x;
}

/// The updated keys and values [B, H, P + T, d_k] of self_attention_cached<Prefix, H>(x):
/// the outputs `Prefix.cache_k` and `Prefix.cache_v` that a kv_cache reads after a step (the
/// same nodes as inside the layer).
template <fixed_string Prefix, int H, class X>
constexpr auto cached_keys_values(X x) {
  auto [q, k, v] = detail::self_qkv<Prefix>(x);
  (void)q;
  return std::make_tuple(detail::cache_state<cache_k_name<Prefix>, H, X>(detail::split_heads<H>(k)),
                         detail::cache_state<cache_v_name<Prefix>, H, X>(detail::split_heads<H>(v)));
}

/// Multi-head cross-attention: queries from x [B, T, D], keys and values from memory
/// [B, S, D] -> [B, T, D]. Masks apply to the scores [B, H, T, S].
template <fixed_string Prefix, int H, class X, class Mem, class... M>
constexpr auto cross_attention(X x, Mem, M...) {
  if constexpr (detail::heads_fit<X, H>() && detail::heads_fit<Mem, H>())
    return block<detail::cross_attention_fn<Prefix, H, M...>, X, Mem>{};
  else return x;
}

/// Cross-attention when decoding: keys and values of the encoder memory were projected once
/// per source (see cross_attention_memory) and enter as inputs `Prefix.memory_k` and
/// `Prefix.memory_v` [B, H, S, d_k].
template <fixed_string Prefix, int H, class X, class... M>
constexpr auto cross_attention_cached(X x, M...) {
  if constexpr (detail::heads_fit<X, H>()) return block<detail::cross_attention_cached_fn<Prefix, H, M...>, X>{};
  else return x;
}

/// The projected memory of cross_attention<Prefix, H>: keys and values [B, H, S, d_k] of
/// memory [B, S, D], computed once per source, as the outputs `Prefix.memory_k` and
/// `Prefix.memory_v` — the names of cross_attention_cached's inputs (feed them by name:
/// executor::named_feeds()).
template <fixed_string Prefix, int H, class Mem>
constexpr auto cross_attention_memory(Mem mem) {
  auto [k, v] = detail::cross_kv_heads<Prefix, H>(mem);
  return std::make_tuple(named<memory_k_name<Prefix>>(k), named<memory_v_name<Prefix>>(v));
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
  auto [kh, vh] = detail::cross_kv_heads<Prefix, H>(mem);
  (void)vh;
  return attention_weights(detail::split_heads<H>(detail::cross_q<Prefix>(x)), kh, masks...);
}

/// The attention weights [B, H, T, S] inside cross_attention_cached<Prefix, H>(x, masks...).
template <fixed_string Prefix, int H, class X, class... M>
constexpr auto cross_attention_cached_weights(X x, M... masks) {
  return attention_weights(detail::split_heads<H>(detail::cross_q<Prefix>(x)),
                           detail::memory_input<memory_k_name<Prefix>, X, H>(), masks...);
}

}  // namespace loom::nn
