// rope: rotary position embedding (Su et al., RoFormer), as Llama applies it to queries and keys.
// Each pair of dims (a, b) of a head is rotated by the angle pos · inv_freq_i:
//
//   inv_freq_i = θ^(−2i / Dh),  angle_i = pos · inv_freq_i   (i < Dh/2; in double, then cos and
//                                                             sin are cast to the scalar)
//   out[a] = x[a] · cos_i − x[b] · sin_i
//   out[b] = x[b] · cos_i + x[a] · sin_i
//   rotate_half (Hugging Face Llama):   a = i,  b = i + Dh/2
//   interleaved (Meta Llama, GPT-J):    a = 2i, b = 2i + 1
//   backward: dx = the inverse rotation of dy (angle −angle_i); positions get no gradient.
//
//   x [.., T, Dh] (Dh even), positions [L.., T] (int): the positions' leading axes L.. are x's
//   first axes and their last is x's T; the axes of x between them (the heads) share them:
//   x [B, H, T, Dh] takes positions [B, T] (each sequence's own offset) or [T] (one for all);
//   rope(x) without positions rotates row t by position t.
//   A negative position throws value_error. Forward saves the cos and sin of every position it
//   was given (Dh values per position) for backward, which then reads nothing else.
#pragma once

#include <span>
#include <tuple>

#include "loom/core/node.hpp"

namespace loom {

/// Which dims of a head RoPE rotates together.
enum class rope_layout {
  rotate_half,  // dim i with dim i + Dh/2 (Hugging Face's Llama: `rotate_half`)
  interleaved,  // dim 2i with dim 2i + 1 (Meta's original Llama, GPT-J)
};

/// True when positions [L.., T] fit x [.., T, Dh]: L.. are x's first axes, T is x's axis −2.
template <class X, class Pos>
inline constexpr bool rope_positions_fit = [] {
  if constexpr (X::rank < 2 || Pos::rank < 1 || Pos::rank > X::rank - 1)
    return false;
  else
    return std::is_same_v<shape_head<Pos, Pos::rank - 1>, shape_head<X, Pos::rank - 1>> &&
           dims_match<dim_at<Pos, -1>, dim_at<X, -2>>;
}();

/// True unless x's last dim is fixed and odd (a named one is checked when the graph runs).
template <class X>
inline constexpr bool rope_head_dim_even = [] {
  if constexpr (X::rank < 1)
    return true;
  else if constexpr (is_fixed_dim<dim_at<X, -1>>)
    return dim_at<X, -1>::value % 2 == 0;
  else
    return true;
}();

namespace ops {
/// The cos and sin forward saves for backward: Dh values for each given position.
std::int64_t rope_saved(const void*, const dims_t& out, std::span<const dims_t> in);
}  // namespace ops

/// rope's attributes (stored in its node's descriptor, read by its kernels).
struct rope_attrs {
  bool interleaved = false;  // rope_layout::interleaved
  double theta = 10000;
  bool with_positions = true;  // a positions input is given; else positions 0..T−1
};

/// rope's declaration: name, traits and kernels (compiled once, whatever the attributes).
/// The traits hold function addresses, so they are a member, not op_def's argument.
struct rope_def : op_def<rope_def, "rope">, compiled_kernels<rope_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr op_traits traits{
      .writes_fresh = true,
      .can_run_in_place = true,
      .backward_in_place = true,
      .saved_elements = &ops::rope_saved,
  };
  template <class T> static void check(const op_args<T>& a);  // ops/rope.cpp
};
extern template struct compiled_kernels<rope_def>;  // ops/rope.cpp

template <rope_layout Layout, double Theta, bool WithPositions = true> struct rope_op : rope_def {
  static_assert(Theta > 0, "rope: theta must be positive");
  static constexpr rope_attrs attrs{Layout == rope_layout::interleaved, Theta, WithPositions};
  template <class X, class... Pos> struct rule {
    static_assert(X::rank >= 2, "rope: x must be [.., T, Dh]");
    static_assert(rope_head_dim_even<X>, "rope: the head dim Dh (x's last axis) must be even");
    static_assert(sizeof...(Pos) == (WithPositions ? 1 : 0), "rope: one positions input or none");
    static_assert((rope_positions_fit<X, Pos> && ...),
                  "rope: positions must be [L.., T], x's first axes then x's T (axis -2): for x [B, H, T, Dh], "
                  "positions [B, T] or [T]");
    using type = X;
  };
};

/// Rotary position embedding of x [.., T, Dh] at positions [L.., T] (an int node: x's first
/// axes then T), pairs of dims in Layout, base Theta (Llama's `rope_theta`); shape unchanged.
/// Throws value_error (at forward) for a negative position, shape_error (at binding) for an
/// odd named Dh.
template <rope_layout Layout, double Theta = 10000.0, class X, class Pos>
constexpr node<rope_op<Layout, Theta>, X, Pos> rope(X, Pos) {
  static_assert(desc_of<resolve_t<Pos>>.elem == dtype::i32, "rope: positions must be an int input");
  return {};
}

/// Rotary position embedding of x [.., T, Dh] at positions 0..T−1 (a whole sequence from its
/// start: training, and a prompt's prefill without a cache); shape unchanged.
template <rope_layout Layout, double Theta = 10000.0, class X>
  requires is_node<X>
constexpr node<rope_op<Layout, Theta, false>, X> rope(X) {
  return {};
}

}  // namespace loom

// Reflection of the attributes (descriptor slots, structural hash, DOT label).
BOOST_HANA_ADAPT_STRUCT(loom::rope_attrs, interleaved, theta, with_positions);
