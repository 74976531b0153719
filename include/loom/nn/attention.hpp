// Attention, built from primitives: scaled dot-product attention (PyTorch's
// F.scaled_dot_product_attention, options and all) and multi-head attention.
//
//   attention<O>(q, k, v, masks...) = softmax(masks(scale · q kᵀ)) v
//       q [.., Hq, T, d], k [.., Hkv, S, d], v [.., Hkv, S, dv] -> [.., Hq, T, dv]; the leading
//       dims broadcast (NumPy's rule). Options O (attention_options): scale (0: 1/√d),
//       is_causal, dropout (on the weights, in training; needs nn::dropout_seed(seed) among the
//       masks), enable_gqa (Hq a multiple of Hkv: each key/value head serves Hq/Hkv query
//       heads, read in place — no copy of the keys and values).
//   self_attention<Prefix, H, O>(x, masks...), cross_attention<Prefix, H, O>(x, memory, masks...):
//       multi-head attention with PyTorch nn.MultiheadAttention's parameters (batch_first):
//         Prefix.in_proj_weight [3D, D] (rows: q, k, v), Prefix.in_proj_bias [3D],
//         Prefix.out_proj.weight [D, D], Prefix.out_proj.bias [D] (no biases with O.bias = false).
//       x [B, T, D], memory [B, S, D] -> [B, T, D]. Heads are split by reshape + transpose
//       ([B, T, H·d_k] -> [B, H, T, d_k]) and concatenated back the same way before out_proj.
//
// Masks are specs applied to the scores in order (after the scale and is_causal):
//   nn::causal                 query i sees keys j ≤ i + (S − T) (bottom-right aligned)
//   nn::padding(len)           keys j ≥ len[b] hidden (len: int [B], PyTorch's key_padding_mask)
//   nn::left_padding(first)    keys j < first[b] hidden
//   nn::allowed(mask)          a bool mask, True = may attend (PyTorch SDPA's bool attn_mask)
//   nn::additive(mask)         a float mask added to the scores (PyTorch's float attn_mask)
//   any user type F with  template <class S> auto operator()(S scores) const  returning the
//   masked scores (a node of the same shape), default-constructible (nodes are types).
// A mask broadcasts onto the scores [.., T, S] (NumPy's rule); one that does not but whose
// first axis is the scores' first (the batch) aligns that axis with the batch and the rest at
// the end: [B, T, S] is a mask per sequence and [B, S] one per key, for every head.
// Building the same expression twice gives the same node, so attention_weights(...) called
// with the same arguments names the weights inside attention().
#pragma once

#include <tuple>
#include <type_traits>

#include "loom/core/broadcast.hpp"
#include "loom/core/node.hpp"
#include "loom/nn/linear.hpp"
#include "loom/nn/masks.hpp"
#include "loom/ops.hpp"

namespace loom::nn {

/// The options of attention(), as PyTorch's scaled_dot_product_attention.
struct attention_options {
  double scale = 0;         // the scores' factor; 0: 1/√d (d: the last dim of q)
  bool is_causal = false;   // causal mask, aligned bottom-right (as nn::causal; PyTorch: top-left)
  double dropout = 0;       // dropout_p on the weights, in training (needs nn::dropout_seed)
  bool enable_gqa = false;  // grouped-query attention: q's heads a multiple of k's and v's
};

/// The options of the multi-head layers, as nn.MultiheadAttention's.
struct mha_options {
  bool bias = true;    // in_proj_bias and out_proj.bias
  double dropout = 0;  // on the attention weights, in training (needs nn::dropout_seed)
};

/// The checks of attention(), each a named condition so that a failed one prints the dims it
/// compared: "heads_divide<loom::fix<6>, loom::fix<4> > evaluates to false".
/// enable_gqa: q's heads Hq a multiple of k's Hkv.
template <class QHeads, class KvHeads>
inline constexpr bool heads_divide = KvHeads::value > 0 && QHeads::value % KvHeads::value == 0;
/// enable_gqa: k and v have the same heads Hkv.
template <class KHeads, class VHeads>
inline constexpr bool kv_heads_match = std::is_same_v<KHeads, VHeads>;
/// q [.., T, d] and k [.., S, d] have the same head dim d.
template <class QDim, class KDim>
inline constexpr bool head_dims_match = std::is_same_v<QDim, KDim>;
/// k [.., S, d] and v [.., S, dv] have the same number of keys S.
template <class KKeys, class VKeys>
inline constexpr bool key_counts_match = std::is_same_v<KKeys, VKeys>;
/// The leading dims of q, k and v (with enable_gqa: those before the heads) broadcast together.
template <class QLead, class KLead, class VLead>
inline constexpr bool qkv_leads_broadcast =
    shapes_broadcast<QLead, KLead> && shapes_broadcast<broadcast_shape<QLead, KLead>, VLead>;

namespace detail {

/// The shapes of grouped-query attention: q [.., Hq, T, d] viewed as [.., Hkv, G, T, d], k and v
/// [.., Hkv, S, d] as [.., Hkv, 1, S, d], so that the batched matmul broadcasts each key/value
/// head over its G = Hq / Hkv query heads (no copy); the scores merge back to [.., Hq, T, S].
template <class QS, class KS>
struct gqa_shapes {
  static constexpr bool ranks_ok = QS::rank >= 3 && KS::rank >= 3 && QS::rank < max_rank && KS::rank < max_rank;
  using q_heads = dim_at<QS, ranks_ok ? -3 : -1>;
  using kv_heads = dim_at<KS, ranks_ok ? -3 : -1>;
  static constexpr bool fixed = is_fixed_dim<q_heads> && is_fixed_dim<kv_heads>;
  static constexpr long hq = fixed ? q_heads::value : 1, hkv = fixed && kv_heads::value > 0 ? kv_heads::value : 1;
  static constexpr long groups = hq / hkv;
  using pre_q = shape_head<QS, ranks_ok ? QS::rank - 3 : 0>;
  using pre_k = shape_head<KS, ranks_ok ? KS::rank - 3 : 0>;
  using q5 = shape_cat<pre_q, shape<fix<hkv>, fix<groups>, dim_at<QS, -2>, dim_at<QS, -1>>>;
  template <class XS>
  using kv5 = shape_cat<shape_head<XS, ranks_ok ? XS::rank - 3 : 0>, shape<fix<hkv>, fix<1>, dim_at<XS, -2>, dim_at<XS, -1>>>;
  using batch = broadcast_shape<pre_q, pre_k>;
  using scores = shape_cat<batch, shape<fix<hq>, dim_at<QS, -2>, dim_at<KS, -2>>>;
  using weights5 = shape_cat<batch, shape<fix<hkv>, fix<groups>, dim_at<QS, -2>, dim_at<KS, -2>>>;
  template <class VS>
  using out = shape_cat<broadcast_shape<pre_q, shape_head<VS, ranks_ok ? VS::rank - 3 : 0>>,
                        shape<fix<hq>, dim_at<QS, -2>, dim_at<VS, -1>>>;
};

/// S's dim I (negative: from the end), or 1 when S has no such axis.
template <class S, int I, bool Has = (S::rank >= -I)>
struct dim_or_one_impl {
  using type = fix<1>;
};
template <class S, int I>
struct dim_or_one_impl<S, I, true> {
  using type = dim_at<S, I>;
};
template <class S, int I>
using dim_or_one = typename dim_or_one_impl<S, I>::type;
/// S without its last N axes (none when it has fewer).
template <class S, int N>
using lead_of = shape_head<S, (S::rank > N ? S::rank - N : 0)>;

/// The dims that attention<O>(q, k, v, masks...) checks, for q, k and v of any shapes QS, KS, VS
/// (a missing axis reads as 1, so that nothing fails here before its own check): the heads (1
/// without enable_gqa), the leading dims before [heads,] T, d and the scores' shape.
template <attention_options O, class QS, class KS, class VS>
struct attention_dims {
  static constexpr int split = O.enable_gqa ? 3 : 2;  // q [lead.., (Hq,) T, d]
  static constexpr bool ranks_ok =
      QS::rank >= split && KS::rank >= split && VS::rank >= split &&
      (!O.enable_gqa || (QS::rank < max_rank && KS::rank < max_rank && VS::rank < max_rank));
  using q_heads = std::conditional_t<O.enable_gqa, dim_or_one<QS, -3>, fix<1>>;
  using k_heads = std::conditional_t<O.enable_gqa, dim_or_one<KS, -3>, fix<1>>;
  using v_heads = std::conditional_t<O.enable_gqa, dim_or_one<VS, -3>, fix<1>>;
  static constexpr bool heads_fixed = is_fixed_dim<q_heads> && is_fixed_dim<k_heads>;
  using q_lead = lead_of<QS, split>;
  using k_lead = lead_of<KS, split>;
  using v_lead = lead_of<VS, split>;
  using scores = shape_cat<broadcast_shape<q_lead, k_lead>,
                           std::conditional_t<O.enable_gqa, shape<q_heads, dim_or_one<QS, -2>, dim_or_one<KS, -2>>,
                                              shape<dim_or_one<QS, -2>, dim_or_one<KS, -2>>>>;
};

/// What attention() returns after a failed check (which has said what is wrong): a node of q's
/// shape with the last dim Last, so that the code after it compiles without further errors.
template <class QS, class Last>
using failed_attention = input_node<"attention: failed check", shape_cat<lead_of<QS, 1>, shape<Last>>>;

/// Stands for the values in attention_weights(): attention() without them returns the weights.
struct no_values {
  using shape = loom::shape<>;
};

/// Whether q, k really are grouped (enable_gqa and different head counts); after attention()'s checks.
template <attention_options O, class Q, class K>
constexpr bool grouped() {
  if constexpr (!O.enable_gqa) return false;
  else return dim_at<typename Q::shape, -3>::value != dim_at<typename K::shape, -3>::value;
}

/// The scores q kᵀ [.., Hq, T, S].
template <attention_options O, class Q, class K>
constexpr auto raw_scores(Q q, K k) {
  if constexpr (grouped<O, Q, K>()) {
    using g = gqa_shapes<typename Q::shape, typename K::shape>;
    auto s = matmul<false, true>(reshape<typename g::q5>(q), reshape<typename g::template kv5<typename K::shape>>(k));
    return reshape<typename g::scores>(s);
  } else {
    return matmul<false, true>(q, k);
  }
}

template <attention_options O, class Q>
constexpr double scale_factor() {
  if constexpr (O.scale != 0) {
    return O.scale;
  } else {
    using d = dim_at<typename Q::shape, -1>;
    static_assert(is_fixed_dim<d>, "attention: the default scale 1/√d needs a fixed head dim d (or give .scale)");
    if constexpr (is_fixed_dim<d>) return inv_sqrt<d::value>;
    else return 1.0;
  }
}

template <double C, class S>
constexpr auto scaled(S s) {
  if constexpr (C == 1.0) return s;
  else return scale<C>(s);
}

template <bool Causal, class S>
constexpr auto causal_if(S s) {
  if constexpr (Causal) return mask_causal(s);
  else return s;
}

/// attention_weights() once its checks have passed.
template <attention_options O, class Q, class K, class... M>
constexpr auto weights(Q q, K k, M... masks) {
  auto scores = scaled<scale_factor<O, Q>()>(raw_scores<O>(q, k));  // [.., Hq, T, S]
  return softmax(apply_masks(causal_if<O.is_causal>(scores), masks...));
}

/// attention() once its checks have passed.
template <attention_options O, class Q, class K, class V, class... M>
constexpr auto attend(Q q, K k, V v, M... masks) {
  using seed = typename seed_of<M...>::type;
  auto w = weights<O>(q, k, masks...);
  auto dropped = [&] {
    if constexpr (O.dropout > 0 && !std::is_same_v<seed, no_seed>) return dropout<O.dropout>(w, seed{});
    else return w;
  }();
  if constexpr (grouped<O, Q, K>()) {
    using g = gqa_shapes<typename Q::shape, typename K::shape>;
    auto o = matmul(reshape<typename g::weights5>(dropped), reshape<typename g::template kv5<typename V::shape>>(v));
    return reshape<typename g::template out<typename V::shape>>(o);  // [.., Hq, T, dv]
  } else {
    return matmul(dropped, v);
  }
}

}  // namespace detail

/// Scaled dot-product attention, PyTorch's F.scaled_dot_product_attention:
/// softmax(masks(scale · q kᵀ)) v, q [.., Hq, T, d], k [.., Hkv, S, d], v [.., Hkv, S, dv] ->
/// [.., Hq, T, dv] (see the top of this file for the options and masks). Dropout on the weights
/// (O.dropout > 0) needs nn::dropout_seed(seed) among the masks and is active in training.
/// Shapes that do not fit are one static_assert naming the dims (checked here, before anything
/// is built, so that no second error follows: see "Mask checks before the layer" in
/// docs/design-notes.md).
template <attention_options O = attention_options{}, class Q, class K, class V, class... M>
constexpr auto attention(Q q, K k, V v, M... masks) {
  constexpr bool weights_only = std::is_same_v<V, detail::no_values>;  // from attention_weights()
  using QS = typename Q::shape;
  using KS = typename K::shape;
  using VS = std::conditional_t<weights_only, KS, typename V::shape>;
  using c = detail::attention_dims<O, QS, KS, VS>;
  using failed = detail::failed_attention<QS, detail::dim_or_one<VS, weights_only ? -2 : -1>>;
  using seed = typename detail::seed_of<M...>::type;
  constexpr bool seeded = O.dropout == 0 || weights_only || !std::is_same_v<seed, detail::no_seed>;
  if constexpr (!seeded) {
    static_assert(seeded, "attention: dropout on the weights needs nn::dropout_seed(seed) among the masks");
    return failed{};
  } else if constexpr (!(O.dropout >= 0 && O.dropout < 1)) {
    static_assert(O.dropout >= 0 && O.dropout < 1, "attention: dropout must be in [0, 1)");
    return failed{};
  } else if constexpr (!c::ranks_ok) {
    static_assert(c::ranks_ok, "attention: q [.., T, d], k [.., S, d] and v [.., S, dv] need at least two axes; "
                               "with enable_gqa, three ([.., H, T, d]) and at most five");
    return failed{};
  } else if constexpr (!c::heads_fixed) {
    static_assert(c::heads_fixed, "attention: with enable_gqa the head dims Hq and Hkv must be fixed");
    return failed{};
  } else if constexpr (!heads_divide<typename c::q_heads, typename c::k_heads>) {
    static_assert(heads_divide<typename c::q_heads, typename c::k_heads>,
                  "attention: with enable_gqa, q's heads Hq must be a multiple of k's and v's Hkv (Hq, Hkv named "
                  "below)");
    return failed{};
  } else if constexpr (!kv_heads_match<typename c::k_heads, typename c::v_heads>) {
    static_assert(kv_heads_match<typename c::k_heads, typename c::v_heads>,
                  "attention: with enable_gqa, k and v must have the same heads Hkv (both named below)");
    return failed{};
  } else if constexpr (!head_dims_match<dim_at<QS, -1>, dim_at<KS, -1>>) {
    static_assert(head_dims_match<dim_at<QS, -1>, dim_at<KS, -1>>,
                  "attention: q [.., T, d] and k [.., S, d] must have the same head dim d (both named below)");
    return failed{};
  } else if constexpr (!key_counts_match<dim_at<KS, -2>, dim_at<VS, -2>>) {
    static_assert(key_counts_match<dim_at<KS, -2>, dim_at<VS, -2>>,
                  "attention: k [.., S, d] and v [.., S, dv] must have the same number of keys S (both named below)");
    return failed{};
  } else if constexpr (!qkv_leads_broadcast<typename c::q_lead, typename c::k_lead, typename c::v_lead>) {
    static_assert(qkv_leads_broadcast<typename c::q_lead, typename c::k_lead, typename c::v_lead>,
                  "attention: the leading dims of q, k and v do not broadcast (named below; without enable_gqa "
                  "they include the heads, which must then be equal)");
    return failed{};
  } else if constexpr (!detail::masks_fit<typename c::scores, M...>()) {
    return failed{};  // the mask's check has said what is wrong
  } else if constexpr (weights_only) {
    return detail::weights<O>(q, k, masks...);
  } else {
    return detail::attend<O>(q, k, v, masks...);
  }
}

/// The attention weights softmax(masks(scale · q kᵀ)) [.., Hq, T, S] of attention<O>(q, k, v,
/// masks...) (before dropout): the same nodes, so executor::value() reads them.
template <attention_options O = attention_options{}, class Q, class K, class... M>
constexpr auto attention_weights(Q q, K k, M... masks) {
  return attention<O>(q, k, detail::no_values{}, masks...);
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
