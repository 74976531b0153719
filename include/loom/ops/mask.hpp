// mask: set attention scores that may not be attended to −∞ (softmax then gives them weight 0;
// a row with no allowed key gets weights 0, see softmax).
//
//   mask_causal(scores):            scores [.., T, S]; key j is masked for query i when
//                                   j > i + (S − T). With a cache of P past keys, S = P + T and
//                                   query i sits at absolute position P + i, so this is the
//                                   causal mask offset by the cache length; in training S = T.
//   mask_padding(scores, valid_len): scores [B, .., T, S], valid_len [B] (int): key j is masked
//                                   in sequence b when j ≥ valid_len[b] (d2l's valid_lens).
//   mask_left_padding(scores, first): key j is masked in sequence b when j < first[b]
//                                   (prompts aligned to the right, as in batched decoding).
//   mask_bool(scores, allowed):     allowed (bool) broadcast onto the scores [.., T, S] (NumPy's
//                                   rule: aligned at the last axis, size 1 or missing axes
//                                   repeated): masked where allowed is false (PyTorch's SDPA
//                                   boolean attn_mask: True may attend).
//   mask_bool<L>(scores, allowed):  the same with the mask's first L axes aligned with the
//                                   scores' first L axes instead, the rest at the end: a
//                                   per-sequence mask [B, T, S] (L = 1) on scores [B, H, T, S],
//                                   or a key mask [B, S] (L = 1) on them.
//
//   backward (all of them): dx = dy where the score was kept, 0 where it was masked.
#pragma once

#include <tuple>

#include "loom/core/node.hpp"

namespace loom {

/// mask_causal's declaration: scores [.., T, S] need two axes at least.
struct mask_causal_op : op_def<mask_causal_op, "mask_causal", in_place_traits>, compiled_kernels<mask_causal_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class S>
  using rule = axes_at_least<mask_causal_op, 2, S>;
};
extern template struct compiled_kernels<mask_causal_op>;  // ops/mask.cpp

/// True when a padding mask's lengths [B] fit scores [B, ...].
template <class LenDim, class BatchDim>
inline constexpr bool padding_batch_matches = std::is_same_v<LenDim, BatchDim>;

/// mask_padding's attributes (stored in its node's descriptor, read by its kernels).
struct mask_padding_attrs {
  bool left = false;  // mask_left_padding: keys before first[b] are masked
};

/// mask_padding's declaration: name, traits, kernels and rule (whichever side is masked).
struct mask_padding_def : op_def<mask_padding_def, "mask_padding", in_place_traits_reading(reads({1}))>,
                          compiled_kernels<mask_padding_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class S, class L>
  struct rule {
    static_assert(S::rank >= 2, "mask_padding: scores need at least two axes [B, .., T, S]");
    static_assert(L::rank == 1, "mask_padding: valid_len must be a vector [B]");
    static_assert(padding_batch_matches<dim_at<L, 0>, dim_at<S, 0>>,
                  "mask_padding: valid_len [B] and the first axis of the scores [B, .., T, S] differ");
    using type = S;
  };
};
extern template struct compiled_kernels<mask_padding_def>;  // ops/mask.cpp

/// mask_padding (Left false: keys j >= valid_len[b]) or mask_left_padding (Left: keys j < first[b]).
template <bool Left>
using mask_padding_op = attributed<mask_padding_def, mask_padding_attrs{Left}>;

namespace detail {
/// The axis of the scores (rank SR) that axis I of a mask (rank MR) with Lead leading axes
/// aligned falls on.
constexpr int mask_axis_on_scores(int i, int mask_rank, int score_rank, int lead) {
  return i < lead ? i : score_rank - (mask_rank - i);
}
template <class MaskShape, class ScoreShape, int Lead>
constexpr bool bool_mask_fits() {
  if constexpr (MaskShape::rank > ScoreShape::rank || Lead > MaskShape::rank) {
    return false;
  } else {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return ((std::is_same_v<dim_at<MaskShape, static_cast<int>(I)>, fix<1>> ||
               std::is_same_v<dim_at<MaskShape, static_cast<int>(I)>,
                              dim_at<ScoreShape, mask_axis_on_scores(static_cast<int>(I), MaskShape::rank,
                                                                     ScoreShape::rank, Lead)>>) &&
              ...);
    }(std::make_index_sequence<MaskShape::rank>{});
  }
}
}  // namespace detail

/// True when a boolean mask broadcasts onto the scores: aligned at the last axis (or, with
/// Lead > 0, its first Lead axes at the scores' first axes), each dim equal or 1. A failed
/// check prints both shapes.
template <class MaskShape, class ScoreShape, int Lead = 0>
inline constexpr bool bool_mask_broadcasts = detail::bool_mask_fits<MaskShape, ScoreShape, Lead>();

/// mask_bool's attributes (stored in its node's descriptor, read by its kernels).
struct mask_bool_attrs {
  long lead = 0;  // the mask's first `lead` axes align with the scores' first axes
};

/// mask_bool's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct mask_bool_def : op_def<mask_bool_def, "mask_bool", in_place_traits_reading(reads({1}))>,
                       compiled_kernels<mask_bool_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
extern template struct compiled_kernels<mask_bool_def>;  // ops/mask.cpp

template <int Lead>
struct mask_bool_op : mask_bool_def {
  static constexpr mask_bool_attrs attrs{Lead};
  template <class S, class M>
  struct rule {
    static_assert(bool_mask_broadcasts<M, S, Lead>,
                  "mask_bool: the mask does not broadcast onto the scores (aligned at the last axis, each of its "
                  "dims must equal the scores' or be 1)");
    using type = S;
  };
};

/// Causal mask over scores [.., T, S], offset by S − T (the cache length when decoding).
inline constexpr op_fn<mask_causal_op> mask_causal{};

/// Masks keys j ≥ valid_len[b] in scores [B, .., T, S]; valid_len is an int input [B].
template <class X, class L>
constexpr node<mask_padding_op<false>, X, L> mask_padding(X, L) {
  static_assert(desc_of<resolve_t<L>>.elem == dtype::i32, "mask_padding: valid_len must be an int input");
  return {};
}

/// Masks keys j < first[b] in scores [B, .., T, S]; first is an int input [B].
template <class X, class L>
constexpr node<mask_padding_op<true>, X, L> mask_left_padding(X, L) {
  static_assert(desc_of<resolve_t<L>>.elem == dtype::i32, "mask_left_padding: first must be an int input");
  return {};
}

/// Masks scores where the boolean input `allowed` is false (PyTorch SDPA's bool attn_mask),
/// `allowed` broadcast onto the scores; with Lead > 0 its first Lead axes align with the
/// scores' first axes (a mask [B, T, S] on scores [B, H, T, S]: Lead = 1).
template <int Lead = 0, class X, class M>
constexpr node<mask_bool_op<Lead>, X, M> mask_bool(X, M) {
  static_assert(desc_of<resolve_t<M>>.elem == dtype::u8, "mask_bool: the mask must be a bool input");
  return {};
}

}  // namespace loom

// Reflection of the attributes (descriptor slots, structural hash, DOT label).
BOOST_HANA_ADAPT_STRUCT(loom::mask_padding_attrs, left);
BOOST_HANA_ADAPT_STRUCT(loom::mask_bool_attrs, lead);
