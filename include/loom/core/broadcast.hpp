// Broadcasting at compile time: NumPy's (and PyTorch's) rule over shape types.
//
//   Two shapes broadcast when, aligned at their last axis, each pair of dims is the same dim
//   or one of the two is fix<1>; a missing leading axis counts as fix<1>. The result takes the
//   dim that is not 1 on each axis: [B, 1, T, S] and [T, S] give [B, 1, T, S]; [B, T, 1] and
//   [1, S] give [B, T, S].
//
// Dims are compared as types: dyn<"T"> and dyn<"S"> do not broadcast even if the run binds
// both to the same size (shapes are types), and a dyn dim bound to 1 at run time is not
// broadcast (it must equal the other operand's dim, which the binding checks).
#pragma once

#include <type_traits>
#include <utility>

#include "loom/core/dims.hpp"

namespace loom {

namespace detail {

/// The dim of S at position I counted from the right (0: the last axis), fix<1> when S has
/// fewer axes.
template <class S, int I, bool Present = (I < S::rank)>
struct dim_from_right {
  using type = fix<1>;
};
template <class S, int I>
struct dim_from_right<S, I, true> {
  using type = dim_at<S, S::rank - 1 - I>;
};
template <class S, int I>
using dim_from_right_t = typename dim_from_right<S, I>::type;

template <class A, class B>
inline constexpr bool dims_broadcast =
    std::is_same_v<A, B> || std::is_same_v<A, fix<1>> || std::is_same_v<B, fix<1>>;
template <class A, class B>
using broadcast_dim_t = std::conditional_t<std::is_same_v<A, fix<1>>, B, A>;

template <class A, class B, class Seq>
struct broadcast_impl;
template <class A, class B, std::size_t... I>
struct broadcast_impl<A, B, std::index_sequence<I...>> {
  static constexpr int rank = sizeof...(I);
  // position k of the result (0 = first axis) is position rank − 1 − k from the right
  static constexpr bool ok =
      (dims_broadcast<dim_from_right_t<A, rank - 1 - static_cast<int>(I)>,
                      dim_from_right_t<B, rank - 1 - static_cast<int>(I)>> &&
       ...);
  using type = shape<broadcast_dim_t<dim_from_right_t<A, rank - 1 - static_cast<int>(I)>,
                                     dim_from_right_t<B, rank - 1 - static_cast<int>(I)>>...>;
};

template <class A, class B>
using broadcast_impl_t =
    broadcast_impl<A, B, std::make_index_sequence<static_cast<std::size_t>(A::rank > B::rank ? A::rank : B::rank)>>;

}  // namespace detail

/// True when shapes A and B broadcast (NumPy's rule, see above). A failed check prints both
/// shapes: "shapes_broadcast<shape<dyn<"T">, fix<8>>, shape<fix<4>>> evaluates to false".
template <class A, class B>
inline constexpr bool shapes_broadcast = detail::broadcast_impl_t<A, B>::ok;

/// The shape of an elementwise op on A and B broadcast together (A itself when they do not
/// broadcast, so that one failed static_assert is all a mistake prints).
template <class A, class B>
using broadcast_shape = std::conditional_t<shapes_broadcast<A, B>, typename detail::broadcast_impl_t<A, B>::type, A>;

/// True when op Op's operands of shapes A and B broadcast: shapes_broadcast, under a name that
/// also names the op in a failed check ("operands_broadcast<loom::sub_op, shape<..>, shape<..>>").
template <class Op, class A, class B>
inline constexpr bool operands_broadcast = shapes_broadcast<A, B>;

/// The shape rule of a binary elementwise op Op whose operands broadcast (NumPy's rule), for its
/// declaration: `template <class A, class B> using rule = broadcast_rule<my_op, A, B>;`.
template <class Op, class A, class B>
struct broadcast_rule {
  static_assert(operands_broadcast<Op, A, B>,
                "the operands' shapes do not broadcast (aligned at the last axis, each pair of dims must be equal or "
                "one of them 1)");
  using type = broadcast_shape<A, B>;
};

/// True when B broadcasts onto A without changing A's shape (B's dims are A's trailing dims or 1):
/// a mask or bias onto scores.
template <class A, class B>
inline constexpr bool broadcasts_onto = B::rank <= A::rank && shapes_broadcast<A, B> &&
                                         std::is_same_v<broadcast_shape<A, B>, A>;

}  // namespace loom
