// A graph's named inputs and named outputs as compile-time maps (Boost.Hana): name → port.
//
// The elements differ in type (each port carries its element kind and rank), so they are a
// heterogeneous collection keyed by compile-time strings: what hana::map is for. The maps hold
// only the graph's names (a handful), never its nodes, so their cost does not grow with the
// graph. graph::feed<"x"> and graph::output<"y"> look names up in them: an unknown name, an
// element type the input does not take, or (for a feed with its dims) a wrong rank does not
// compile, and the error names the port.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include <boost/hana/at_key.hpp>
#include <boost/hana/contains.hpp>
#include <boost/hana/core/to.hpp>
#include <boost/hana/map.hpp>
#include <boost/hana/pair.hpp>
#include <boost/hana/string.hpp>
#include <boost/hana/type.hpp>

#include "loom/core/fixed_string.hpp"
#include "loom/core/node_desc.hpp"

namespace loom {

/// A named input or output of a graph as the types know it: what element kind it holds and
/// how many axes it has. Its dims may be dynamic; they are checked when an executor binds.
template <dtype Elem, int Rank>
struct port {
  static constexpr dtype elem = Elem;
  static constexpr int rank = Rank;
};

namespace detail {
/// A name as a Hana compile-time string (the key of a ports map).
template <fixed_string Name, std::size_t... I>
constexpr auto hana_name(std::index_sequence<I...>) {
  return boost::hana::string_c<Name.data[I]...>;
}
template <fixed_string Name>
constexpr auto hana_key() {
  return hana_name<Name>(std::make_index_sequence<Name.length>{});
}

/// The plan's nodes of one kind of port (inputs, or named outputs), by index in the order.
template <const auto& Data, bool Inputs>
constexpr auto port_nodes() {
  constexpr auto is_port = [](const node_desc* d) {
    return Inputs ? d->op->role == node_role::input : d->op->is_named_output;
  };
  constexpr std::size_t count = [&] {
    std::size_t n = 0;
    for (const node_desc* d : Data.order) n += is_port(d) ? 1 : 0;
    return n;
  }();
  std::array<int, count> at{};
  std::size_t k = 0;
  for (std::size_t i = 0; i < Data.order.size(); ++i)
    if (is_port(Data.order[i])) at[k++] = static_cast<int>(i);
  return at;
}

template <const auto& Data, int Node, std::size_t... I>
constexpr auto port_entry(std::index_sequence<I...>) {
  constexpr const node_desc* d = Data.order[static_cast<std::size_t>(Node)];
  return boost::hana::make_pair(boost::hana::string_c<d->name[I]...>, boost::hana::type_c<port<d->elem, d->rank>>);
}

template <const auto& Data, bool Inputs, std::size_t... K>
constexpr auto ports_map(std::index_sequence<K...>) {
  constexpr auto nodes = port_nodes<Data, Inputs>();
  return boost::hana::make_map(port_entry<Data, nodes[K]>(
      std::make_index_sequence<Data.order[static_cast<std::size_t>(nodes[K])]->name.size()>{})...);
}

/// The map of a plan's inputs (Inputs) or named outputs.
template <const auto& Data, bool Inputs>
constexpr auto ports() {
  return ports_map<Data, Inputs>(std::make_index_sequence<port_nodes<Data, Inputs>().size()>{});
}

/// Named predicates of the checks, so that a failed static_assert prints the port's name.
template <fixed_string Name, bool Found>
inline constexpr bool graph_has_input = Found;
template <fixed_string Name, bool Found>
inline constexpr bool graph_has_named_output = Found;
template <fixed_string Name, dtype Want, class E>
inline constexpr bool input_takes =
    Want == dtype::real   ? std::is_same_v<E, float> || std::is_same_v<E, double>
    : Want == dtype::i32 ? std::is_same_v<E, std::int32_t> || std::is_same_v<E, std::int64_t>
                         : std::is_same_v<E, bool> || std::is_same_v<E, std::uint8_t>;
template <fixed_string Name, int Want, std::size_t Given>
inline constexpr bool input_rank_is = static_cast<std::size_t>(Want) == Given;
}  // namespace detail

}  // namespace loom
