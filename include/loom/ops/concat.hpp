// concat and split along one axis (time: the KV cache; heads).
//
//   concat<Axis>(x_1, ..., x_n): every x_i has the same dims except along Axis;
//       y's Axis dim is their sum (P + T for a cache of P keys and T new ones).
//       backward: dx_i = the slice of dy that x_i filled.
//       Along the rows (axis −2), y may be x_1's storage grown in place (feed::with_room):
//       then only x_2, ... are copied (a KV cache's append, without copying the cache).
//   slice<Axis, Begin, Size>(x): y = x[.., Begin : Begin + Size, ..] along Axis (dims as types:
//       fix<N> or dyn<"P">).  backward: dx[.., Begin : Begin + Size, ..] += dy.
//   split<Axis, N>(x): N equal slices of a fixed axis, as a std::tuple (structured bindings).
#pragma once

#include <tuple>

#include "loom/core/node.hpp"

namespace loom {

namespace detail {
template <int Axis, class S0, class S>
constexpr bool same_except_axis() {
  if constexpr (S0::rank != S::rank) {
    return false;
  } else {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return ((static_cast<int>(I) == Axis || std::is_same_v<dim_at<S0, static_cast<int>(I)>, dim_at<S, static_cast<int>(I)>>) &&
              ...);
    }(std::make_index_sequence<S0::rank>{});
  }
}
template <class... D>
struct dim_sum;
template <class D>
struct dim_sum<D> {
  using type = D;
};
template <class D, class E, class... R>
struct dim_sum<D, E, R...> {
  using type = typename dim_sum<add_dims_t<D, E>, R...>::type;
};
}  // namespace detail

/// True when concat's operands agree on every axis except the concatenated one.
template <int Axis, class First, class Other>
inline constexpr bool concat_dims_match = detail::same_except_axis<Axis, First, Other>();

/// concat's attributes (stored in its node's descriptor, read by its kernels).
struct concat_attrs {
  long axis = 0;
};

/// concat reads operands whose matrices are spaced apart in place when it joins along one of
/// the last two axes (a KV cache's blocks, read through feed::strided).
constexpr bool concat_reads_strided(const node_desc& node, int) {
  return node.rank >= 2 && load_attrs<concat_attrs>(node).axis >= node.rank - 2;
}

/// concat along the rows (axis −2) can grow its first operand's storage in place when that
/// has room (a KV cache's keys, fed with feed::with_room): it then writes only the new rows.
constexpr bool concat_appends_to_input(const node_desc& node) {
  return node.rank >= 2 && load_attrs<concat_attrs>(node).axis == node.rank - 2;
}

/// concat's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct concat_def : op_def<concat_def, "concat">, compiled_kernels<concat_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr op_traits traits{
      .reads_strided = &concat_reads_strided,
      .appends_to_input = &concat_appends_to_input,
      .writes_fresh = true,
  };
};
extern template struct compiled_kernels<concat_def>;  // ops/concat.cpp

template <int Axis>
struct concat_op : concat_def {
  static constexpr concat_attrs attrs{Axis};
  template <class S0, class... S>
  struct rule {
    static constexpr int axis = norm_axis<Axis, S0::rank>;
    static_assert(axis >= 0 && axis < S0::rank, "concat: axis out of range");
    static_assert((concat_dims_match<axis, S0, S> && ...),
                  "concat: operands must have the same rank and the same dims except along the axis");
    using type = shape_set<S0, axis, typename detail::dim_sum<dim_at<S0, axis>, dim_at<S, axis>...>::type>;
  };
};

/// Concatenation along Axis (negative counts from the end).
template <int Axis, class X0, class... X>
constexpr node<concat_op<norm_axis<Axis, X0::shape::rank>>, X0, X...> concat(X0, X...) {
  static_assert(sizeof...(X) >= 1, "concat: needs at least two operands");
  return {};
}

/// True when a fixed slice fits its axis.
template <class Begin, class Size, class Dim>
inline constexpr bool slice_fits = [] {
  if constexpr (is_fixed_dim<Begin> && is_fixed_dim<Size> && is_fixed_dim<Dim>)
    return Begin::value + Size::value <= Dim::value;
  else
    return true;  // checked at run time
}();

/// slice's attributes (stored in its node's descriptor, read by its kernels).
struct slice_attrs {
  long axis = 0;
  dim_expr begin{}, size{};  // bound at run time (op_args::dattr)
};

/// slice's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct slice_def : op_def<slice_def, "slice">, compiled_kernels<slice_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class T> static void check(const op_args<T>& a);
};
extern template struct compiled_kernels<slice_def>;  // ops/concat.cpp

template <int Axis, class Begin, class Size>
struct slice_op : slice_def {
  static constexpr slice_attrs attrs{Axis, dim_expr_of<Begin>(), dim_expr_of<Size>()};
  template <class S>
  struct rule {
    static constexpr int axis = norm_axis<Axis, S::rank>;
    static_assert(axis >= 0 && axis < S::rank, "slice: axis out of range");
    static_assert(slice_fits<Begin, Size, dim_at<S, axis>>, "slice: Begin + Size exceeds the axis");
    using type = shape_set<S, axis, Size>;
  };
};

/// x[.., Begin : Begin + Size, ..] along Axis; Begin and Size are dims (fix<N>, dyn<"P">).
template <int Axis, class Begin, class Size, class X>
constexpr node<slice_op<norm_axis<Axis, X::shape::rank>, Begin, Size>, X> slice(X) {
  return {};
}

/// N equal slices of a fixed-size axis, as a std::tuple: `auto [q, k, v] = split<-1, 3>(qkv);`
template <int Axis, int N, class X>
constexpr auto split(X x) {
  using D = dim_at<typename X::shape, Axis>;
  static_assert(is_fixed_dim<D>, "split: the axis must have a fixed size (use slice for dynamic ones)");
  static_assert(D::value % N == 0, "split: the axis size is not divisible by the number of parts");
  constexpr long part = D::value / N;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::make_tuple(slice<Axis, fix<static_cast<long>(I) * part>, fix<part>>(x)...);
  }(std::make_index_sequence<N>{});
}

}  // namespace loom

// Reflection of the attributes (descriptor slots, structural hash, DOT label).
BOOST_HANA_ADAPT_STRUCT(loom::concat_attrs, axis);
BOOST_HANA_ADAPT_STRUCT(loom::slice_attrs, axis, begin, size);
