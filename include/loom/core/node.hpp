// Node types: a graph is a value whose type is the graph.
//
//   node<Op, In...>            the op Op applied to the nodes In...; its shape is computed by
//                              Op's shape rule from the input shapes (a static_assert if they
//                              do not fit)
//   input_node<Name, S, E>     a tensor fed at run time by name
//   param_node<Name, S, Init>  a named trainable tensor, looked up in a param_store
//   block<Fn, In...>           the subgraph Fn{}(In{}...) under a short type name (see below)
//
// Node objects are empty: everything is in the type. Two identical expressions have the same
// type and so are one node (common subexpressions are computed once).
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "loom/core/dims.hpp"
#include "loom/core/node_desc.hpp"

namespace loom {

/// Marker for the graph's scalar type (float when training, double in gradcheck).
struct real {};

template <class E>
inline constexpr dtype dtype_of = [] {
  static_assert(std::is_same_v<E, real> || std::is_same_v<E, int> || std::is_same_v<E, std::int32_t> ||
                    std::is_same_v<E, std::int64_t> || std::is_same_v<E, long long> || std::is_same_v<E, bool> ||
                    std::is_same_v<E, std::uint8_t>,
                "input<Name, Shape, E>: E must be loom::real (the graph's scalar), int (int32 or int64) or bool");
  if constexpr (std::is_same_v<E, real>) return dtype::real;
  else if constexpr (std::is_same_v<E, bool> || std::is_same_v<E, std::uint8_t>) return dtype::u8;
  else return dtype::i32;
}();

/// The entries of the two kinds of leaves: tensors fed by name, and named parameters.
namespace detail {
constexpr op_entry leaf_entry(std::string_view name, node_role role) {
  op_entry e{};
  e.name = name;
  e.id = op_id(name);
  e.role = role;
  return e;
}
}  // namespace detail
inline constexpr op_entry input_entry = detail::leaf_entry("input", node_role::input);
inline constexpr op_entry param_entry = detail::leaf_entry("param", node_role::param);

/// A parameter's attributes: the fan-in its initialiser uses (init_kind::linear_bias).
struct param_attrs {
  long fan_in = 0;
};
}  // namespace loom
BOOST_HANA_ADAPT_STRUCT(loom::param_attrs, fan_in);
namespace loom {

template <class N>
struct resolve {
  using type = N;
};
/// The node a type stands for: itself, or for a block, the root of its subgraph.
template <class N>
using resolve_t = typename resolve<N>::type;

template <class N>
inline constexpr node_desc desc_of = N::make_desc();

namespace detail {
template <class A>
constexpr node_desc slots_from(A a) {
  node_desc d;
  store_attrs(d, a);
  return d;
}
/// The descriptor slots of Op's attributes, computed once per op type (a graph has many nodes
/// of one op: walking the attributes per node was a measurable part of compile time).
template <class Op>
inline constexpr node_desc attr_slots_of = slots_from(Op::attrs);
}  // namespace detail

/// Address of the descriptor of node N (blocks resolve to their root).
template <class N>
constexpr const node_desc* desc_ptr() {
  return &desc_of<resolve_t<N>>;
}

template <class T>
inline constexpr bool is_node = requires { typename T::shape; typename T::node_tag; };

template <class Op, class... In>
struct node {
  using node_tag = void;
  using shape = typename Op::template rule<typename In::shape...>::type;
  static constexpr std::array<const node_desc*, sizeof...(In)> input_descs{desc_ptr<In>()...};
  static constexpr node_desc make_desc() {
    node_desc d;
    d.op = &entry_for<Op>();
    d.rank = shape::rank;
    d.dims = shape_exprs_of<shape>();
    d.inputs = input_descs;
    if constexpr (requires { Op::attrs; }) {
      using attrs_t = std::remove_cvref_t<decltype(Op::attrs)>;
      const node_desc& slots = detail::attr_slots_of<Op>;  // stored once per op, not per node
      d.iattr = slots.iattr;
      d.fattr = slots.fattr;
      d.dattr = slots.dattr;
      if constexpr (reflect::is_reflected<attrs_t>) d.attrs_text = &detail::attrs_text<attrs_t>;
    }
    if constexpr (requires { Op::output_name; }) d.name = Op::output_name;  // named outputs
    d.hash = detail::hash_desc(d);
    return d;
  }
};

template <fixed_string Name, class Shape, class E = real>
struct input_node {
  static_assert(is_shape<Shape>, "input<Name, Shape>: Shape must be loom::shape<...>");
  using node_tag = void;
  using shape = Shape;
  static constexpr node_desc make_desc() {
    node_desc d;
    d.op = &input_entry;
    d.elem = dtype_of<E>;
    d.name = Name.view();
    d.rank = Shape::rank;
    d.dims = shape_exprs_of<Shape>();
    d.hash = detail::hash_desc(d);
    return d;
  }
};

namespace detail {
template <class D>
inline constexpr bool is_plain_dim = is_fixed_dim<D> || is_dyn_dim<D>;
template <class S>
inline constexpr bool plain_shape = false;
template <class... D>
inline constexpr bool plain_shape<shape<D...>> = (is_plain_dim<D> && ...);
template <class S>
inline constexpr bool fixed_shape = false;
template <class... D>
inline constexpr bool fixed_shape<shape<D...>> = (is_fixed_dim<D> && ...);
}  // namespace detail

/// Parameter initialisers (see init_kind). `FanIn` is linear_bias's fan-in and normal_std's
/// standard deviation in thousandths.
template <init_kind K, long FanIn = 0>
struct init {
  static constexpr init_kind kind = K;
  static constexpr long fan_in = FanIn;
};

template <fixed_string Name, class Shape, class Init = init<init_kind::zeros>>
struct param_node {
  static_assert(is_shape<Shape>, "param<Name, Shape>: Shape must be loom::shape<...>");
  static_assert(detail::plain_shape<Shape>,
                "param<Name, Shape>: parameter dims must be fix<N> or dyn<\"name\"> (a dim bound by the store's tensor, "
                "given to make_params)");
  using node_tag = void;
  using shape = Shape;
  static constexpr node_desc make_desc() {
    node_desc d;
    d.op = &param_entry;
    d.name = Name.view();
    d.rank = Shape::rank;
    d.dims = shape_exprs_of<Shape>();
    d.init = Init::kind;
    store_attrs(d, param_attrs{Init::fan_in});
    d.hash = detail::hash_desc(d);
    return d;
  }
};

/// A tensor fed at run time under `Name`, of shape `Shape` (fixed or named dims) and
/// element type E (loom::real — the graph's scalar —, int for ids and lengths, bool for masks).
/// Ids and lengths are held as int32 inside the graph; int64 (std::int64_t, PyTorch's default)
/// names the same input, and an int64 tensor fed to it is converted on the way in (feed).
template <fixed_string Name, class Shape, class E = real>
constexpr input_node<Name, Shape, E> input() {
  static_assert(detail::plain_shape<Shape>, "input<Name, Shape>: input dims must be fix<N> or dyn<\"name\">");
  return {};
}

/// A trainable tensor named `Name` (a PyTorch state_dict key where a layer mirrors one). Its
/// dims are fixed, or named (dyn<"V">: a vocabulary learnt at run time): those are bound by the
/// tensor in the store when the graph runs, and given to make_params when it is created.
template <fixed_string Name, class Shape, class Init = init<init_kind::zeros>>
constexpr param_node<Name, Shape, Init> param() {
  return {};
}

/// A named subgraph: block<Fn, In...> is the node Fn{}(In{}...), but its type name mentions
/// each input once instead of once per use. Layers return blocks so that type names (and
/// error messages, and debug info) grow linearly with depth instead of exponentially.
/// Fn must be an empty literal type whose call operator builds the subgraph.
template <class Fn, class... In>
struct block {
  using node_tag = void;
  using expr = decltype(Fn{}(In{}...));
  using shape = typename expr::shape;
};
template <class Fn, class... In>
struct resolve<block<Fn, In...>> {
  using type = resolve_t<typename block<Fn, In...>::expr>;
};

/// An op's builder: op_fn<Op>{}(x, y) is the node Op applied to x and y (node<Op, X, Y>), its
/// shape given by Op's rule. Ops declare theirs as `inline constexpr op_fn<silu_op> silu{};`.
template <class Op>
struct op_fn {
  template <class... In>
    requires(is_node<In> && ...)
  constexpr node<Op, In...> operator()(In...) const {
    return {};
  }
};

/// Wraps Fn{}(in...) in a block (see block).
template <class Fn, class... In>
constexpr block<Fn, In...> make_block(Fn, In...) {
  return {};
}

}  // namespace loom
