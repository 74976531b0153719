// Attention mask specs: what nn::attention and the multi-head layers apply to the scores
// [.., T, S], in order (see the top of attention.hpp for the list and broadcasting).
//
// A spec is a default-constructible type with  template <class S> auto operator()(S scores)
// const  returning the masked scores; the built-in ones also give their mask's shape
// (mask_shape) and whether it fits scores of a shape (fits<ScoreShape>), which the layers check
// before building themselves, so that a mistake is one short error naming both shapes.
#pragma once

#include <type_traits>
#include <utility>

#include "loom/core/broadcast.hpp"
#include "loom/core/node.hpp"
#include "loom/ops.hpp"

namespace loom::nn {

namespace detail {
/// The Lead (see mask_bool) with which a mask of shape M fits scores of shape S: 0 when it
/// broadcasts (NumPy), 1 when it fits with its first axis on the batch, −1 when neither.
template <class M, class S>
constexpr int mask_lead() {
  if constexpr (bool_mask_broadcasts<M, S, 0>) return 0;
  else if constexpr (M::rank >= 2 && M::rank < S::rank && bool_mask_broadcasts<M, S, 1>) return 1;
  else return -1;
}
template <class M, int R, class Ones = std::make_index_sequence<static_cast<std::size_t>(R - M::rank)>>
struct lead_aligned_impl;
template <class M, int R, std::size_t... I>
struct lead_aligned_impl<M, R, std::index_sequence<I...>> {
  using type = shape_cat<shape_cat<shape_head<M, 1>, shape<std::conditional_t<(I >= 0), fix<1>, void>...>>,
                         shape_tail<M, 1>>;
};
/// M with size-1 axes inserted after its first, up to rank R: [B, T, S] -> [B, 1, T, S].
template <class M, int R>
using lead_aligned = typename lead_aligned_impl<M, R>::type;
}  // namespace detail

/// True when a mask of shape MaskShape fits scores of shape ScoreShape (Fits: the spec's own
/// verdict). A failed check prints both shapes.
template <class MaskShape, class ScoreShape, bool Fits>
inline constexpr bool mask_fits_scores = Fits;

/// Causal mask: query i sees keys j ≤ i + (S − T) (the cache length when decoding).
struct causal_t {
  using mask_shape = shape<>;
  template <class S>
  static constexpr bool fits = S::rank >= 2;
  template <class S>
  constexpr auto operator()(S scores) const {
    return mask_causal(scores);
  }
};
inline constexpr causal_t causal{};

/// Padding mask from per-sequence key lengths, an int input [B].
template <class Len>
struct padding_t {
  using mask_shape = typename Len::shape;
  template <class S>
  static constexpr bool fits = Len::shape::rank == 1 && S::rank >= 2 &&
                               padding_batch_matches<dim_at<typename Len::shape, 0>, dim_at<S, 0>>;
  template <class S>
  constexpr auto operator()(S scores) const {
    return mask_padding(scores, Len{});
  }
};
template <class Len>
constexpr padding_t<Len> padding(Len) {
  return {};
}

/// Left-padding mask: keys j < first[b] are hidden (prompts aligned right); first: int [B].
template <class First>
struct left_padding_t {
  using mask_shape = typename First::shape;
  template <class S>
  static constexpr bool fits = First::shape::rank == 1 && S::rank >= 2 &&
                               padding_batch_matches<dim_at<typename First::shape, 0>, dim_at<S, 0>>;
  template <class S>
  constexpr auto operator()(S scores) const {
    return mask_left_padding(scores, First{});
  }
};
template <class First>
constexpr left_padding_t<First> left_padding(First) {
  return {};
}

/// Boolean mask (True may attend), broadcast onto the scores (see the top of this file).
template <class Mask>
struct allowed_t {
  using mask_shape = typename Mask::shape;
  template <class S>
  static constexpr bool fits = detail::mask_lead<typename Mask::shape, S>() >= 0;
  template <class S>
  constexpr auto operator()(S scores) const {
    constexpr int lead = detail::mask_lead<typename Mask::shape, typename S::shape>();
    if constexpr (lead >= 0) return mask_bool<lead>(scores, Mask{});
    else return scores;  // the layer's check has said what is wrong
  }
};
template <class Mask>
constexpr allowed_t<Mask> allowed(Mask) {
  static_assert(desc_of<resolve_t<Mask>>.elem == dtype::u8, "nn::allowed: the mask must be a bool input");
  return {};
}

/// Float mask added to the scores (−∞ hides a key), broadcast like nn::allowed.
template <class Mask>
struct additive_t {
  using mask_shape = typename Mask::shape;
  template <class S>
  static constexpr bool fits = detail::mask_lead<typename Mask::shape, S>() >= 0;
  template <class S>
  constexpr auto operator()(S scores) const {
    using M = typename Mask::shape;
    constexpr int lead = detail::mask_lead<M, typename S::shape>();
    if constexpr (lead == 0) return add(scores, Mask{});
    else if constexpr (lead == 1) return add(scores, reshape<detail::lead_aligned<M, S::shape::rank>>(Mask{}));
    else return scores;
  }
};
template <class Mask>
constexpr additive_t<Mask> additive(Mask) {
  static_assert(desc_of<resolve_t<Mask>>.elem == dtype::real, "nn::additive: the mask must be real-valued");
  return {};
}

/// The randomness of attention dropout: an int node [2] (seed, step), as loom::dropout's.
/// Not a mask: it rides along with them to attention() and the layers.
template <class Seed>
struct dropout_seed_t {};
template <class Seed>
constexpr dropout_seed_t<Seed> dropout_seed(Seed) {
  static_assert(is_dropout_seed<typename Seed::shape>, "nn::dropout_seed: the seed must be an int input [2]");
  return {};
}

namespace detail {

template <class M>
inline constexpr bool is_seed_spec = false;
template <class Seed>
inline constexpr bool is_seed_spec<dropout_seed_t<Seed>> = true;

/// The seed among the specs M..., or no_seed when there is none.
struct no_seed {};
template <class... M>
struct seed_of {
  using type = no_seed;
};
template <class First, class... Rest>
struct seed_of<First, Rest...> {
  using type = typename seed_of<Rest...>::type;
};
template <class Seed, class... Rest>
struct seed_of<dropout_seed_t<Seed>, Rest...> {
  using type = Seed;
};

template <class S>
constexpr S apply_masks(S s) {
  return s;
}
template <class S, class M, class... Rest>
constexpr auto apply_masks(S s, M m, Rest... rest) {
  if constexpr (is_seed_spec<M>) return apply_masks(s, rest...);
  else return apply_masks(m(s), rest...);
}

/// Whether spec M applies to scores of shape S: its own verdict, or true for a user spec that
/// gives none (its own static_asserts speak for it).
template <class M, class S>
constexpr bool spec_fits() {
  if constexpr (is_seed_spec<M>) return true;
  else if constexpr (requires { M::template fits<S>; }) return M::template fits<S>;
  else return true;
}
template <class M>
struct spec_shape {
  using type = shape<>;
};
template <class M>
  requires requires { typename M::mask_shape; }
struct spec_shape<M> {
  using type = typename M::mask_shape;
};

/// Checks a mask against the scores [.., T, S] of a layer before the layer is built, so that a
/// mistake prints one short error naming the mask's and the scores' shapes.
template <class Scores, class M>
constexpr bool mask_fits() {
  constexpr bool ok = spec_fits<M, Scores>();
  static_assert(mask_fits_scores<typename spec_shape<M>::type, Scores, ok>,
                "attention: a mask does not fit the scores [.., T, S] (both shapes are named below: the mask's "
                "dims must equal the scores' trailing dims or be 1; a mask [B, T, S] or [B, S] may also align "
                "its first axis with the batch)");
  return ok;
}
template <class Scores, class... M>
constexpr bool masks_fit() {
  return (mask_fits<Scores, M>() && ...);
}

}  // namespace detail

}  // namespace loom::nn
