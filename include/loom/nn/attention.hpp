// Multi-head attention, built from primitives (scaled dot-product attention itself, with its
// options and masks, is in loom/nn/scaled_dot_product.hpp, included here).
//
//   self_attention<Prefix, H, O>(x, masks...), cross_attention<Prefix, H, O>(x, memory, masks...):
//       multi-head attention with PyTorch nn.MultiheadAttention's parameters (batch_first):
//         Prefix.in_proj_weight [3D, D] (rows: q, k, v), Prefix.in_proj_bias [3D],
//         Prefix.out_proj.weight [D, D], Prefix.out_proj.bias [D] (no biases with O.bias = false).
//       x [B, T, D], memory [B, S, D] -> [B, T, D]. Heads are split by reshape + transpose
//       ([B, T, H·d_k] -> [B, H, T, d_k]) and concatenated back the same way before out_proj.
//
// The decoding state: nn::kv_state (a cached state of keys or values for any block) and the
// names the layers' caches and projected memories go by.
#pragma once

#include <tuple>
#include <type_traits>

#include "loom/core/node.hpp"
#include "loom/nn/linear.hpp"
#include "loom/nn/masks.hpp"
#include "loom/nn/scaled_dot_product.hpp"
#include "loom/ops.hpp"

namespace loom::nn {

/// The options of the multi-head layers, as nn.MultiheadAttention's.
struct mha_options {
  bool bias = true;    // in_proj_bias and out_proj.bias
  double dropout = 0;  // on the attention weights, in training (needs nn::dropout_seed)
};

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

/// A cached state has rows [B, heads, T, head_dim]: four axes, the new positions on axis 2.
template <class Rows>
inline constexpr bool kv_rows_are_4d = Rows::rank == 4;

/// The state of a decoding attention block, for blocks a user writes (grouped-query heads, rotated
/// keys, any head count and size): the cached rows, the input `Name` [B, Hkv, P, d] — the shape
/// of `rows` with its time axis replaced by the dim "P", the number of cached positions —
/// followed by the step's new `rows` [B, Hkv, T, d], as the output `Name` [B, Hkv, P + T, d].
/// An input and an output of one name make a state of the decoding graph (named.hpp), which
/// nn::kv_cache finds, allocates, feeds and reads back; fed with room, the concat writes the new
/// rows straight into the cache's storage. Keys rotated before kv_state (RoPE) are cached
/// rotated. `auto keys = nn::kv_state<"l0.cache_k">(k_heads);` then attention(q, keys, values,
/// nn::causal): the causal mask is offset by P by itself.
template <fixed_string Name, class Rows>
constexpr auto kv_state(Rows rows) {
  using R = typename Rows::shape;
  static_assert(kv_rows_are_4d<R>, "kv_state: rows must be [B, heads, T, head_dim]");
  if constexpr (!kv_rows_are_4d<R>) return rows;
  else
    return named<Name>(
        concat<2>(input<Name, shape<dim_at<R, 0>, dim_at<R, 1>, dyn<"P">, dim_at<R, 3>>>(), rows));
}

/// Multi-head attention: the heads H split the model dim D (D a multiple of H).
template <class ModelDim, class Heads>
inline constexpr bool heads_split_model_dim = Heads::value > 0 && ModelDim::value % Heads::value == 0;
/// Cross-attention: the memory's model dim equals the queries'.
template <class XDim, class MemoryDim>
inline constexpr bool model_dims_match = std::is_same_v<XDim, MemoryDim>;

namespace detail {

/// Checks (with readable static_asserts) that x is [B, T, D] with D divisible by H.
template <class X, int H>
constexpr bool heads_fit() {
  using S = typename X::shape;
  static_assert(S::rank == 3, "multi-head attention: inputs must be [B, T, D]");
  if constexpr (S::rank == 3) {
    static_assert(is_fixed_dim<dim_at<S, 2>>, "multi-head attention: the model dim D must be fixed");
    if constexpr (is_fixed_dim<dim_at<S, 2>>) {
      static_assert(heads_split_model_dim<dim_at<S, 2>, fix<H>>,
                    "multi-head attention: the model dim must be divisible by the number of heads (D, H named below)");
      return heads_split_model_dim<dim_at<S, 2>, fix<H>>;
    }
  }
  return false;
}

/// Checks that cross-attention's memory [B, S, D] has the model dim D of its queries x [B, T, D].
template <class X, class Mem>
constexpr bool memory_fits() {
  using x_dim = dim_at<typename X::shape, -1>;
  using memory_dim = dim_at<typename Mem::shape, -1>;
  static_assert(model_dims_match<x_dim, memory_dim>,
                "cross-attention: memory [B, S, D] must have the model dim D of the queries x [B, T, D] (x's and "
                "the memory's named below)");
  return model_dims_match<x_dim, memory_dim>;
}

/// The scores' shape [B, H, T, S] of a multi-head layer over x [B, T, D] with S keys.
template <class X, int H, class Keys>
using scores_shape = shape<dim_at<typename X::shape, 0>, fix<H>, dim_at<typename X::shape, 1>, Keys>;

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

/// x Wᵀ (+ b): a projection with or without its bias.
template <bool Bias, class X, class W, class B>
constexpr auto project(X x, W w, B b) {
  if constexpr (Bias) return add(matmul<false, true>(x, w), b);
  else return matmul<false, true>(x, w);
}

/// Projections q, k, v for self-attention: one GEMM with the packed weight.
template <fixed_string Prefix, bool Bias = true, class X>
constexpr auto self_qkv(X x) {
  constexpr long d = dim_at<typename X::shape, -1>::value;
  auto qkv = project<Bias>(x, in_proj_weight<Prefix, d>(), in_proj_bias<Prefix, d>());  // [B, T, 3D]
  return split<-1, 3>(qkv);
}

/// Query of cross-attention: rows [0, D) of the packed weight. x [B, T, D] -> [B, T, D].
template <fixed_string Prefix, bool Bias = true, class X>
constexpr auto cross_q(X x) {
  constexpr long d = dim_at<typename X::shape, -1>::value;
  return project<Bias>(x, slice<0, fix<0>, fix<d>>(in_proj_weight<Prefix, d>()),
                       slice<0, fix<0>, fix<d>>(in_proj_bias<Prefix, d>()));
}

/// Keys and values of cross-attention, heads split: rows [D, 3D) of the packed weight.
/// memory [B, S, D] -> ([B, H, S, d_k], [B, H, S, d_k]).
template <fixed_string Prefix, int H, bool Bias = true, class Mem>
constexpr auto cross_kv_heads(Mem mem) {
  constexpr long d = dim_at<typename Mem::shape, -1>::value;
  auto kv = project<Bias>(mem, slice<0, fix<d>, fix<2 * d>>(in_proj_weight<Prefix, d>()),
                          slice<0, fix<d>, fix<2 * d>>(in_proj_bias<Prefix, d>()));  // [B, S, 2D]
  auto [k, v] = split<-1, 2>(kv);
  return std::make_tuple(split_heads<H>(k), split_heads<H>(v));
}

/// Attention over heads already split ([B, H, T, d_k] and [B, H, S, d_k]), merged back and
/// projected by out_proj: [B, T, D].
template <fixed_string Prefix, mha_options O, class QH, class KH, class VH, class... M>
constexpr auto heads_attention(QH qh, KH kh, VH vh, M... masks) {
  constexpr long d = dim_at<typename QH::shape, 1>::value * dim_at<typename QH::shape, 3>::value;
  return linear<Prefix + ".out_proj", d, O.bias>(
      merge_heads(attention<attention_options{.dropout = O.dropout}>(qh, kh, vh, masks...)));
}

/// A layer's keys (or values) after a step, for H heads of size D / H (see nn::kv_state).
template <fixed_string Name, int H, class X, class Rows>
constexpr auto cache_state(Rows rows) {
  return kv_state<Name>(rows);
}

/// Projected encoder memory for cached cross-attention: [B, H, S, d_k].
template <fixed_string Name, class X, int H>
constexpr auto memory_input() {
  using S = typename X::shape;
  return input<Name, shape<dim_at<S, 0>, fix<H>, dyn<"S">, fix<dim_at<S, 2>::value / H>>>();
}

template <fixed_string Prefix, int H, mha_options O, class... M>
struct self_attention_fn {
  template <class X>
  constexpr auto operator()(X x) const {
    auto [q, k, v] = self_qkv<Prefix, O.bias>(x);
    return heads_attention<Prefix, O>(split_heads<H>(q), split_heads<H>(k), split_heads<H>(v), M{}...);
  }
};

/// The same layer when decoding: keys and values are the cached ones followed by the new
/// ones, K = concat<time>(cache_k, k_new); masks see S = P + T keys (causal is offset by P).
template <fixed_string Prefix, int H, mha_options O, class... M>
struct self_attention_cached_fn {
  template <class X>
  constexpr auto operator()(X x) const {
    auto [q, k, v] = self_qkv<Prefix, O.bias>(x);
    auto keys = cache_state<cache_k_name<Prefix>, H, X>(split_heads<H>(k));    // [B, H, P + T, d_k]
    auto values = cache_state<cache_v_name<Prefix>, H, X>(split_heads<H>(v));  // [B, H, P + T, d_k]
    return heads_attention<Prefix, O>(split_heads<H>(q), keys, values, M{}...);
  }
};

template <fixed_string Prefix, int H, mha_options O, class... M>
struct cross_attention_fn {
  template <class X, class Mem>
  constexpr auto operator()(X x, Mem mem) const {
    auto [kh, vh] = cross_kv_heads<Prefix, H, O.bias>(mem);
    return heads_attention<Prefix, O>(split_heads<H>(cross_q<Prefix, O.bias>(x)), kh, vh, M{}...);
  }
};

/// Cross-attention against memory projected once per source (memory_k, memory_v inputs).
template <fixed_string Prefix, int H, mha_options O, class... M>
struct cross_attention_cached_fn {
  template <class X>
  constexpr auto operator()(X x) const {
    return heads_attention<Prefix, O>(split_heads<H>(cross_q<Prefix, O.bias>(x)),
                                      memory_input<memory_k_name<Prefix>, X, H>(),
                                      memory_input<memory_v_name<Prefix>, X, H>(), M{}...);
  }
};

}  // namespace detail

/// Multi-head self-attention over x [B, T, D] with H heads -> [B, T, D]; parameters under
/// Prefix as in nn.MultiheadAttention (options O: bias, dropout). Masks (see the top of this
/// file) apply to the scores [B, H, T, T]; one that does not fit them does not compile, with a
/// short message naming both shapes.
template <fixed_string Prefix, int H, mha_options O = mha_options{}, class X, class... M>
constexpr auto self_attention(X x, M...) {
  // Each check runs only when the ones before it passed: a failed one has said what is wrong.
  if constexpr (!detail::heads_fit<X, H>()) return x;
  else if constexpr (!detail::masks_fit<detail::scores_shape<X, H, dim_at<typename X::shape, 1>>, M...>()) return x;
  else return block<detail::self_attention_fn<Prefix, H, O, M...>, X>{};
}

/// Multi-head self-attention over the new positions x [B, T, D] when decoding with a KV
/// cache: the layer's cached keys and values enter as the inputs `Prefix.cache_k` and
/// `Prefix.cache_v` [B, H, P, d_k]; keys are concat<time>(cache_k, k_new) and nn::causal is
/// offset by P. Same parameters and same functions as self_attention: prefill (P = 0, T =
/// prompt), chunked prefill and one-token decode (T = 1) are all this one graph.
template <fixed_string Prefix, int H, mha_options O = mha_options{}, class X, class... M>
constexpr auto self_attention_cached(X x, M...) {
  if constexpr (!detail::heads_fit<X, H>()) return x;
  else if constexpr (!detail::masks_fit<detail::scores_shape<X, H, add_dims_t<dyn<"P">, dim_at<typename X::shape, 1>>>,
                                        M...>())
    return x;
  else return block<detail::self_attention_cached_fn<Prefix, H, O, M...>, X>{};
}

/// The updated keys and values [B, H, P + T, d_k] of self_attention_cached<Prefix, H>(x):
/// the outputs `Prefix.cache_k` and `Prefix.cache_v` that a kv_cache reads after a step (the
/// same nodes as inside the layer).
template <fixed_string Prefix, int H, mha_options O = mha_options{}, class X>
constexpr auto cached_keys_values(X x) {
  auto [q, k, v] = detail::self_qkv<Prefix, O.bias>(x);
  (void)q;
  return std::make_tuple(detail::cache_state<cache_k_name<Prefix>, H, X>(detail::split_heads<H>(k)),
                         detail::cache_state<cache_v_name<Prefix>, H, X>(detail::split_heads<H>(v)));
}

/// Multi-head cross-attention: queries from x [B, T, D], keys and values from memory
/// [B, S, D] -> [B, T, D]. Masks apply to the scores [B, H, T, S].
template <fixed_string Prefix, int H, mha_options O = mha_options{}, class X, class Mem, class... M>
constexpr auto cross_attention(X x, Mem, M...) {
  if constexpr (!detail::heads_fit<X, H>()) return x;
  else if constexpr (!detail::memory_fits<X, Mem>()) return x;
  else if constexpr (!detail::heads_fit<Mem, H>()) return x;
  else if constexpr (!detail::masks_fit<detail::scores_shape<X, H, dim_at<typename Mem::shape, 1>>, M...>()) return x;
  else return block<detail::cross_attention_fn<Prefix, H, O, M...>, X, Mem>{};
}

/// Cross-attention when decoding: keys and values of the encoder memory were projected once
/// per source (see cross_attention_memory) and enter as inputs `Prefix.memory_k` and
/// `Prefix.memory_v` [B, H, S, d_k].
template <fixed_string Prefix, int H, mha_options O = mha_options{}, class X, class... M>
constexpr auto cross_attention_cached(X x, M...) {
  if constexpr (!detail::heads_fit<X, H>()) return x;
  else if constexpr (!detail::masks_fit<detail::scores_shape<X, H, dyn<"S">>, M...>()) return x;
  else return block<detail::cross_attention_cached_fn<Prefix, H, O, M...>, X>{};
}

/// The projected memory of cross_attention<Prefix, H>: keys and values [B, H, S, d_k] of
/// memory [B, S, D], computed once per source, as the outputs `Prefix.memory_k` and
/// `Prefix.memory_v` — the names of cross_attention_cached's inputs (feed them by name:
/// executor::named_feeds()).
template <fixed_string Prefix, int H, mha_options O = mha_options{}, class Mem>
constexpr auto cross_attention_memory(Mem mem) {
  auto [k, v] = detail::cross_kv_heads<Prefix, H, O.bias>(mem);
  return std::make_tuple(named<memory_k_name<Prefix>>(k), named<memory_v_name<Prefix>>(v));
}

/// The attention weights [B, H, T, S] inside self_attention<Prefix, H, O>(x, masks...): the
/// same nodes, so executor::value() reads them after a forward of a graph using that layer.
template <fixed_string Prefix, int H, mha_options O = mha_options{}, class X, class... M>
constexpr auto self_attention_weights(X x, M... masks) {
  auto [q, k, v] = detail::self_qkv<Prefix, O.bias>(x);
  (void)v;
  return attention_weights(detail::split_heads<H>(q), detail::split_heads<H>(k), masks...);
}

/// The attention weights [B, H, T, S] inside cross_attention<Prefix, H, O>(x, memory, masks...).
template <fixed_string Prefix, int H, mha_options O = mha_options{}, class X, class Mem, class... M>
constexpr auto cross_attention_weights(X x, Mem mem, M... masks) {
  auto [kh, vh] = detail::cross_kv_heads<Prefix, H, O.bias>(mem);
  (void)vh;
  return attention_weights(detail::split_heads<H>(detail::cross_q<Prefix, O.bias>(x)), kh, masks...);
}

/// The attention weights [B, H, T, S] inside cross_attention_cached<Prefix, H, O>(x, masks...).
template <fixed_string Prefix, int H, mha_options O = mha_options{}, class X, class... M>
constexpr auto cross_attention_cached_weights(X x, M... masks) {
  return attention_weights(detail::split_heads<H>(detail::cross_q<Prefix, O.bias>(x)),
                           detail::memory_input<memory_k_name<Prefix>, X, H>(), masks...);
}

}  // namespace loom::nn
