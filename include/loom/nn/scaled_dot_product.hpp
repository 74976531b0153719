// Scaled dot-product attention, built from primitives: PyTorch's
// F.scaled_dot_product_attention, options and all (the multi-head layers are in
// loom/nn/attention.hpp, which includes this file).
//
//   attention<O>(q, k, v, masks...) = softmax(masks(scale · q kᵀ)) v
//       q [.., Hq, T, d], k [.., Hkv, S, d], v [.., Hkv, S, dv] -> [.., Hq, T, dv]; the leading
//       dims broadcast (NumPy's rule). Options O (attention_options): scale (0: 1/√d),
//       is_causal, dropout (on the weights, in training; needs nn::dropout_seed(seed) among the
//       masks), enable_gqa (Hq a multiple of Hkv: each key/value head serves Hq/Hkv query
//       heads, read in place — no copy of the keys and values).
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

}  // namespace loom::nn
