// Dimensions and shapes as types.
//
//   fix<64>        a dimension known at compile time
//   dyn<"T">       a named dimension bound at run time (every use of "T" must agree)
//   dsum<C, dyn<"P">, dyn<"T">>   C + P + T: what concat along a dynamic axis produces
//
// Dims are canonical: two dims are the same dim exactly when their types are the same, so
// shape rules compare dims with std::is_same.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "loom/core/fixed_string.hpp"

namespace loom {

inline constexpr int max_rank = 6;        // tensors have at most this many axes
inline constexpr int max_dim_terms = 4;   // symbols in one dim expression (P + T + ...)

template <class... T>
struct type_list {
  static constexpr std::size_t size = sizeof...(T);
};

/// A dimension fixed at compile time.
template <long N>
struct fix {
  static_assert(N >= 0, "fix<N>: a dimension cannot be negative");
  static constexpr long value = N;
};

/// A dimension named `Name`, bound to a size when the graph runs.
template <fixed_string Name>
struct dyn {
  static_assert(Name.length > 0, "dyn<\"\">: a dynamic dimension needs a name");
  static constexpr auto name = Name;
};

/// C + Σ Syms, Syms sorted by name. Build it with add_dims_t, never by hand.
template <long C, class... Syms>
struct dsum {};

/// A dim at run time: constant + Σ (values bound to the symbols).
struct dim_expr {
  long constant = 0;
  int n_syms = 0;
  std::array<std::string_view, max_dim_terms> syms{};

  constexpr bool is_fixed() const { return n_syms == 0; }
  // Written out by hand: GCC 12 rejects the defaulted comparison of the string_view array in
  // constant expressions when compiling with sanitizers.
  friend constexpr bool operator==(const dim_expr& a, const dim_expr& b) {
    if (a.constant != b.constant || a.n_syms != b.n_syms) return false;
    for (int k = 0; k < a.n_syms; ++k) {
      const std::string_view x = a.syms[static_cast<std::size_t>(k)], y = b.syms[static_cast<std::size_t>(k)];
      if (x.size() != y.size()) return false;
      for (std::size_t c = 0; c < x.size(); ++c)
        if (x[c] != y[c]) return false;
    }
    return true;
  }
};

namespace detail {
template <class D>
struct dim_parts;  // constant part and list of dyn<> terms
template <long N>
struct dim_parts<fix<N>> {
  static constexpr long constant = N;
  using syms = type_list<>;
};
template <fixed_string S>
struct dim_parts<dyn<S>> {
  static constexpr long constant = 0;
  using syms = type_list<dyn<S>>;
};
template <long C, class... S>
struct dim_parts<dsum<C, S...>> {
  static constexpr long constant = C;
  using syms = type_list<S...>;
};

template <class L1, class L2>
struct list_cat;
template <class... A, class... B>
struct list_cat<type_list<A...>, type_list<B...>> {
  using type = type_list<A..., B...>;
};

template <long C, class... S>
struct dim_from_sorted {
  using type = dsum<C, S...>;
};
template <long C>
struct dim_from_sorted<C> {
  using type = fix<C>;
};
template <fixed_string S>
struct dim_from_sorted<0, dyn<S>> {
  using type = dyn<S>;
};

template <long C, class List>
struct make_dim;
template <long C, class... S>
struct make_dim<C, type_list<S...>> {
  static constexpr std::size_t n = sizeof...(S);
  static_assert(n <= max_dim_terms, "dims: too many symbols in one dimension (P + T + ...)");
  static constexpr std::array<std::size_t, n> order = [] {
    std::array<std::string_view, n> names{S::name.view()...};
    std::array<std::size_t, n> idx{};
    for (std::size_t i = 0; i < n; ++i) idx[i] = i;
    for (std::size_t i = 1; i < n; ++i)  // insertion sort: stable, and constexpr
      for (std::size_t j = i; j > 0 && names[idx[j]] < names[idx[j - 1]]; --j) std::swap(idx[j], idx[j - 1]);
    return idx;
  }();
  template <std::size_t... I>
  static auto build(std::index_sequence<I...>)
      -> typename dim_from_sorted<C, std::tuple_element_t<order[I], std::tuple<S...>>...>::type;
  using type = decltype(build(std::make_index_sequence<n>{}));
};
}  // namespace detail

/// The dim A + B in canonical form (fix<3> + fix<4> is fix<7>; dyn<"T"> + dyn<"P"> is
/// dsum<0, dyn<"P">, dyn<"T">>).
template <class A, class B>
using add_dims_t = typename detail::make_dim<
    detail::dim_parts<A>::constant + detail::dim_parts<B>::constant,
    typename detail::list_cat<typename detail::dim_parts<A>::syms,
                              typename detail::dim_parts<B>::syms>::type>::type;

template <class D>
inline constexpr bool is_fixed_dim = false;
template <long N>
inline constexpr bool is_fixed_dim<fix<N>> = true;

template <class D>
inline constexpr bool is_dyn_dim = false;
template <fixed_string S>
inline constexpr bool is_dyn_dim<dyn<S>> = true;

template <class D>
inline constexpr bool is_dim = false;
template <long N>
inline constexpr bool is_dim<fix<N>> = true;
template <fixed_string S>
inline constexpr bool is_dim<dyn<S>> = true;
template <long C, class... S>
inline constexpr bool is_dim<dsum<C, S...>> = true;

/// The run-time description of a dim type.
template <class D>
constexpr dim_expr dim_expr_of() {
  dim_expr e;
  e.constant = detail::dim_parts<D>::constant;
  [&]<class... S>(type_list<S...>) {
    ((e.syms[e.n_syms++] = S::name.view()), ...);
  }(typename detail::dim_parts<D>::syms{});
  return e;
}

/// A shape: a list of dims, outermost first.
template <class... D>
struct shape {
  static_assert((is_dim<D> && ...), "shape<...>: every entry must be fix<N> or dyn<\"name\">");
  static_assert(sizeof...(D) <= max_rank, "shape<...>: loom tensors have at most 6 axes");
  static constexpr int rank = sizeof...(D);
  using dims = type_list<D...>;
};

template <class S>
inline constexpr bool is_shape = false;
template <class... D>
inline constexpr bool is_shape<shape<D...>> = true;

namespace detail {
template <int I, class S>
struct dim_at_impl;
template <int I, class... D>
struct dim_at_impl<I, shape<D...>> {
  static constexpr int rank = sizeof...(D);
  static constexpr int index = I < 0 ? rank + I : I;
  static_assert(index >= 0 && index < rank, "shape: axis out of range");
  using type = std::tuple_element_t<index, std::tuple<D...>>;
};
}  // namespace detail

/// The I-th dim of shape S; negative I counts from the end (-1 is the last axis).
template <class S, int I>
using dim_at = typename detail::dim_at_impl<I, S>::type;

/// Normalises a possibly negative axis of a rank-R shape.
template <int Axis, int R>
inline constexpr int norm_axis = Axis < 0 ? R + Axis : Axis;

namespace detail {
template <class S, class Idx>
struct take_impl;
template <class... D, std::size_t... I>
struct take_impl<shape<D...>, std::index_sequence<I...>> {
  using type = shape<std::tuple_element_t<I, std::tuple<D...>>...>;
};
template <std::size_t Off, class Seq>
struct offset_seq;
template <std::size_t Off, std::size_t... I>
struct offset_seq<Off, std::index_sequence<I...>> {
  using type = std::index_sequence<(Off + I)...>;
};
template <class A, class B>
struct shape_cat_impl;
template <class... A, class... B>
struct shape_cat_impl<shape<A...>, shape<B...>> {
  using type = shape<A..., B...>;
};
template <class S, int Axis, class New, class Seq>
struct set_dim_impl;
template <class... D, int Axis, class New, std::size_t... I>
struct set_dim_impl<shape<D...>, Axis, New, std::index_sequence<I...>> {
  using type =
      shape<std::conditional_t<static_cast<int>(I) == Axis, New, std::tuple_element_t<I, std::tuple<D...>>>...>;
};
}  // namespace detail

/// The first N dims of S.
template <class S, int N>
using shape_head = typename detail::take_impl<S, std::make_index_sequence<N>>::type;
/// S without its first N dims.
template <class S, int N>
using shape_tail =
    typename detail::take_impl<S, typename detail::offset_seq<N, std::make_index_sequence<S::rank - N>>::type>::type;
/// True when Lead is S without its last axis: per-row indices of S (cross-entropy's targets of
/// logits [.., V], positions of x [.., T, D]).
template <class S, class Lead>
inline constexpr bool is_leading_shape = [] {
  if constexpr (S::rank < 1 || Lead::rank != S::rank - 1)
    return false;
  else
    return std::is_same_v<shape_head<S, S::rank - 1>, Lead>;
}();
/// The dims of A followed by those of B.
template <class A, class B>
using shape_cat = typename detail::shape_cat_impl<A, B>::type;
/// S with the dim at Axis replaced by New.
template <class S, int Axis, class New>
using shape_set = typename detail::set_dim_impl<S, norm_axis<Axis, S::rank>, New,
                                                std::make_index_sequence<S::rank>>::type;

/// The run-time description of every dim of S.
template <class S>
constexpr std::array<dim_expr, max_rank> shape_exprs_of() {
  std::array<dim_expr, max_rank> r{};
  [&]<class... D>(type_list<D...>) {
    int i = 0;
    ((r[i++] = dim_expr_of<D>()), ...);
  }(typename S::dims{});
  return r;
}

// ---- named predicates, so that a failed static_assert prints the two dims ----

/// True when two dims are the same dim (same fixed size, or the same symbol).
template <class A, class B>
inline constexpr bool dims_match = std::is_same_v<A, B>;

}  // namespace loom
