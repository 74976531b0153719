// add: y = a + b, broadcast (NumPy's rule, core/broadcast.hpp): a bias [D] on [B, T, D], a
// float attention mask [T, S] or [B, 1, T, S] on scores [B, H, T, S], [B, T, 1] + [1, S].
//   backward: da = dy summed over the axes a broadcasts along (axes it lacks or has of size 1);
//             db likewise.
// sum: y = Σ x over every element, a scalar (shape<>).  backward: dx = dy.
#pragma once

#include "loom/core/broadcast.hpp"
#include "loom/core/node.hpp"

namespace loom {

/// True when B's dims are the trailing dims of A's.
template <class A, class B>
inline constexpr bool is_shape_suffix = [] {
  if constexpr (B::rank > A::rank) return false;
  else return std::is_same_v<shape_tail<A, A::rank - B::rank>, B>;
}();

struct add_op : op_def<add_op, "add", in_place_traits>, compiled_kernels<add_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class A, class B> using rule = broadcast_rule<add_op, A, B>;
};
extern template struct compiled_kernels<add_op>;  // ops/add.cpp

/// a + b elementwise, the two broadcast together (NumPy's rule): [B, T, D] + [D], [B, H, T, S] +
/// [B, 1, T, S]. Shapes that do not broadcast do not compile (the message names both).
inline constexpr op_fn<add_op> add{};

namespace detail {
/// op(a, b) with the operand of higher rank first, for a commutative op's operator: the other
/// broadcasts onto it.
template <class Op, class A, class B>
constexpr auto higher_rank_first(op_fn<Op> op, A a, B b) {
  if constexpr (A::shape::rank >= B::shape::rank) return op(a, b);
  else return op(b, a);
}
}  // namespace detail

/// a + b for nodes (add).
template <class A, class B>
  requires(is_node<A> && is_node<B>)
constexpr auto operator+(A a, B b) {
  return detail::higher_rank_first(add, a, b);
}

struct sum_op : op_def<sum_op, "sum">, compiled_kernels<sum_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class S> struct rule { using type = shape<>; };
};
extern template struct compiled_kernels<sum_op>;  // ops/add.cpp

/// The sum of every element: a scalar (shape<>), e.g. to make a loss for tests.
inline constexpr op_fn<sum_op> sum{};

}  // namespace loom
