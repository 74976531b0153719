// make_graph(outputs...): the compile-time plan of a graph, and what can be done with it.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "loom/core/node.hpp"
#include "loom/core/params.hpp"
#include "loom/graph/executor.hpp"
#include "loom/graph/plan.hpp"
#include "loom/graph/ports.hpp"

namespace loom {

/// Writes the graph as Graphviz DOT (one box per node: op, shape; inputs and parameters by name).
std::string to_dot(const plan_view& plan);

/// Creates every parameter the graph uses, initialised like PyTorch's defaults for the layer
/// that owns it (see init_kind), from a seeded generator. Existing entries are kept. A
/// parameter with a named dim (dyn<"V">) takes its size from `dims` (by name); throws
/// value_error when it is not there.
template <class T>
void init_params(const plan_view& plan, param_store<T>& store, std::uint64_t seed);
template <class T>
void init_params(const plan_view& plan, param_store<T>& store, std::uint64_t seed,
                 std::span<const std::pair<std::string_view, std::int64_t>> dims);

template <class... Outs>
struct graph;

/// A graph's inputs as a compile-time map (Boost.Hana) from name (a hana::string) to
/// port<elem, rank>: `hana::contains(inputs_of(g), BOOST_HANA_STRING("tokens"))`, or iterate
/// it with hana::for_each to list what a graph takes. Built from the plan's names only, and
/// only where it is asked for: a free function, not a member, so that no graph type pays for it
/// (as a member it cost 27 MB of compiler memory in the largest test).
template <class... Outs>
constexpr auto inputs_of(graph<Outs...>) {
  return detail::ports<graph<Outs...>::data, true>();
}
/// The graph's named outputs (named<"...">, read with executor::output("...")) as the same kind
/// of map.
template <class... Outs>
constexpr auto named_outputs_of(graph<Outs...>) {
  return detail::ports<graph<Outs...>::data, false>();
}
/// The port of graph G's input Name (a port<elem, rank> type); does not compile if G has none.
template <class G, fixed_string Name>
using input_port = typename decltype(+inputs_of(G{})[detail::hana_key<Name>()])::type;

/// The graph whose outputs are Outs...: a plan computed at compile time.
template <class... Outs>
struct graph {
  static constexpr std::array<const node_desc*, sizeof...(Outs)> roots{desc_ptr<Outs>()...};
  static constexpr detail::plan_sizes sizes = detail::measure(roots);
  static_assert(sizes.names_unique,
                "make_graph: two different nodes have the same name (named<\"...\">): names must be unique");
  static constexpr auto data =
      detail::build_plan<sizes.nodes, sizes.edges, sizes.syms, static_cast<int>(sizeof...(Outs)), sizes.named>(roots);

  /// The plan, type-erased (what executors, gradcheck and to_dot take).
  static plan_view plan() { return detail::view_of(data); }
  /// Number of distinct nodes (inputs and parameters included).
  static constexpr int size() { return sizes.nodes; }

  /// An executor of this graph in scalar type T over the parameters in `params`.
  template <class T>
  ::loom::executor<T> executor(param_store<T>& params, exec_options options = {}) const {
    return ::loom::executor<T>(plan(), params, options);
  }
  /// A store holding every parameter of this graph, initialised from `seed`.
  template <class T>
  param_store<T> make_params(std::uint64_t seed) const {
    param_store<T> store;
    init_params(plan(), store, seed);
    return store;
  }
  /// The same, giving the sizes of the parameters' named dims: `make_params<float>(1, {{"V", 65}})`.
  template <class T>
  param_store<T> make_params(std::uint64_t seed,
                             std::initializer_list<std::pair<std::string_view, std::int64_t>> dims) const {
    param_store<T> store;
    init_params(plan(), store, seed, std::span<const std::pair<std::string_view, std::int64_t>>(dims.begin(), dims.size()));
    return store;
  }
  /// The index in plan() of the input named `name`, or −1; usable at compile time.
  static constexpr int input_named(std::string_view name) {
    for (int i = 0; i < sizes.nodes; ++i)
      if (data.order[static_cast<std::size_t>(i)]->op->role == node_role::input &&
          data.order[static_cast<std::size_t>(i)]->name == name)
        return i;
    return -1;
  }
  /// A feed for the graph's input `Name`, checked at compile time: a name the graph has no
  /// input of, or a tensor whose element type the input does not take (real: float or double;
  /// int: int32 or int64; bool: bool or uint8), does not compile. The tensor's rank and dims
  /// are checked when an executor binds it, as for any feed. `run.forward({g.feed<"x">(xs)})`.
  template <fixed_string Name, class E>
  static ::loom::feed feed(const tensor<E>& t) {
    check_feed<Name, E>();
    return ::loom::feed(std::string(Name.view()), t);
  }
  /// The same for values the caller keeps (borrowed: they must outlive backward()) with their
  /// dims written out: the rank is checked at compile time too, so
  /// `g.feed<"tokens">(ids.data(), {B, T})` does not compile when the input has three axes.
  template <fixed_string Name, class E, std::size_t R>
  static ::loom::feed feed(const E* values, const std::int64_t (&dims)[R]) {
    check_feed<Name, E>();
    if constexpr (has_input<Name>()) {
      constexpr int want = input_port<graph, Name>::rank;
      static_assert(detail::input_rank_is<Name, want, R>, "feed<Name>: the input has another number of axes");
    }
    return ::loom::feed(std::string(Name.view()), tensor_view<const E>{values, dims_t(std::span<const std::int64_t>(dims, R))});
  }
  /// The value of the named output `Name` after forward (executor::output(name)); a name the
  /// graph has no named output of does not compile.
  template <fixed_string Name, class T>
  static tensor_view<const T> output(const ::loom::executor<T>& run) {
    static_assert(detail::graph_has_named_output<Name, boost::hana::contains(detail::ports<data, false>(),
                                                                             detail::hana_key<Name>())>,
                  "output<Name>: the graph has no named output of this name (named<\"...\">)");
    return run.output(Name.view());
  }
  std::string dot() const { return to_dot(plan()); }
  /// The memory plan of an executor<T> with `options` for the given dims, without running
  /// (see executor::memory_plan): `g.memory_plan<float>({{"B", 16}, {"T", 64}})`.
  template <class T>
  memory_report memory_plan(std::initializer_list<std::pair<std::string_view, std::int64_t>> dims,
                            exec_options options = {}) const {
    param_store<T> none;
    return ::loom::executor<T>(plan(), none, options).memory_plan(dims);
  }

 private:
  template <fixed_string Name>
  static constexpr bool has_input() {
    return boost::hana::contains(detail::ports<data, true>(), detail::hana_key<Name>());
  }
  template <fixed_string Name, class E>
  static constexpr void check_feed() {
    static_assert(detail::graph_has_input<Name, has_input<Name>()>, "feed<Name>: the graph has no input of this name");
    if constexpr (has_input<Name>()) {
      constexpr dtype want = input_port<graph, Name>::elem;
      static_assert(detail::input_takes<Name, want, E>,
                    "feed<Name>: the input does not take this element type (real: float or double; int: int32 or "
                    "int64; bool: bool or uint8)");
    }
  }
};

namespace detail {
// The outputs of make_graph(...) with std::tuples of nodes spliced in, in order.
template <class Done, class... Rest>
struct flat_outputs;
template <class... Done>
struct flat_outputs<type_list<Done...>> {
  using type = graph<Done...>;
};
template <class... Done, class... Tup, class... Rest>
struct flat_outputs<type_list<Done...>, std::tuple<Tup...>, Rest...> {
  using type = typename flat_outputs<type_list<Done...>, Tup..., Rest...>::type;
};
template <class... Done, class Out, class... Rest>
struct flat_outputs<type_list<Done...>, Out, Rest...> {
  static_assert(is_node<Out>, "make_graph: every argument must be a graph node (or a std::tuple of them)");
  using type = typename flat_outputs<type_list<Done..., Out>, Rest...>::type;
};
}  // namespace detail

/// The graph computing `outputs...` (nodes built with input<>, param<> and the ops, or
/// std::tuples of them, taken in order); its plan — unique nodes, topological order,
/// consumers, dynamic dims, named outputs — is computed at compile time. Output k is read
/// with executor::output(k); a node named with named<"...">, wherever it is, with
/// executor::output("...").
template <class... Outs>
constexpr typename detail::flat_outputs<type_list<>, Outs...>::type make_graph(Outs...) {
  static_assert(sizeof...(Outs) >= 1, "make_graph: give at least one output");
  return {};
}

}  // namespace loom
