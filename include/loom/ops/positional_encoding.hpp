// positional encoding: adds the sinusoidal encoding of each step's position (Vaswani et al.).
//
//   PE[pos, 2i]     = sin(pos / 10000^(2i / D))
//   PE[pos, 2i + 1] = cos(pos / 10000^(2i / D))      (computed in double, then cast)
//
//   add_positional_encoding(x, positions): x [.., T, D], positions [.., T] (int, x's leading
//       dims) -> y = x + PE[positions]. A negative position throws value_error.
//   add_positional_encoding(x): x [.., T, D] -> y[.., t, :] = x[.., t, :] + PE[t, :]
//       (positions 0..T−1). iattr[0] is 1 when a positions input is given..
//   backward: dx = dy; positions get no gradient.
#pragma once

#include <tuple>

#include "loom/core/node.hpp"

namespace loom {

/// True when positions [.., T] are the leading dims of x [.., T, D].
template <class X, class Pos>
inline constexpr bool positions_fit = is_leading_shape<X, Pos>;

/// positional_encoding's attributes (stored in its node's descriptor, read by its kernels).
struct positional_encoding_attrs {
  bool with_positions = false;  // a positions input [.., T] is given
};

/// positional_encoding's declaration: name, traits, kernels and rule (positions given or not).
struct positional_encoding_def : op_def<positional_encoding_def, "positional_encoding", in_place_traits>,
                                 compiled_kernels<positional_encoding_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class X, class... Pos>
  struct rule {
    static_assert(X::rank >= 2, "add_positional_encoding: x must be [.., T, D]");
    static_assert(sizeof...(Pos) <= 1, "add_positional_encoding: one positions input or none");
    static_assert((positions_fit<X, Pos> && ...),
                  "add_positional_encoding: positions must have x's dims without the last [.., T]");
    using type = X;
  };
};
extern template struct compiled_kernels<positional_encoding_def>;  // ops/positional_encoding.cpp

/// The op with its attribute: whether the node has a positions input (its builders below
/// give it one exactly when WithPositions).
template <bool WithPositions>
using positional_encoding_op = attributed<positional_encoding_def, positional_encoding_attrs{WithPositions}>;

/// x [.., T, D] + PE[positions], positions an int node [.., T]. Throws value_error (at
/// forward) for a negative position.
template <class X, class Pos>
constexpr node<positional_encoding_op<true>, X, Pos> add_positional_encoding(X, Pos) {
  static_assert(desc_of<resolve_t<Pos>>.elem == dtype::i32, "add_positional_encoding: positions must be an int input");
  return {};
}

/// x [.., T, D] + PE[0..T−1] (every sequence starts at position 0).
template <class X>
constexpr node<positional_encoding_op<false>, X> add_positional_encoding(X) {
  return {};
}

}  // namespace loom

// Reflection of the attributes (descriptor slots, structural hash, DOT label).
BOOST_HANA_ADAPT_STRUCT(loom::positional_encoding_attrs, with_positions);
