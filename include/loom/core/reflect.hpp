// Reflection of plain structs, with Boost.Hana: a struct adapted once with
// BOOST_HANA_ADAPT_STRUCT(ns::my_struct, field_a, field_b) (at global scope, after the struct)
// can be walked field by field, by name. loom uses it wherever one declaration should give many
// things: an op's attributes give the node's descriptor slots, its structural hash and its DOT
// label; a model's configuration and a program's settings give the checkpoint's metadata, the
// message naming the field that differs between a checkpoint and the program (or between two
// ranks of a data-parallel job), and the values a run records.
//
// The adapted list must name every field: `reflect::fields_complete<S>` counts the aggregate's
// fields and compares, so a field added to the struct and not to the list does not compile
// where loom reflects the struct.
#pragma once

#include <array>
#include <charconv>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <boost/hana/accessors.hpp>
#include <boost/hana/adapt_struct.hpp>
#include <boost/hana/first.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/string.hpp>

namespace loom::reflect {

/// True for a struct adapted with BOOST_HANA_ADAPT_STRUCT (or defined with BOOST_HANA_DEFINE_STRUCT).
template <class S>
inline constexpr bool is_reflected = boost::hana::Struct<S>::value;

/// The number of fields the adaptation names.
template <class S>
constexpr std::size_t field_count() {
  return decltype(boost::hana::length(boost::hana::accessors<S>()))::value;
}

namespace detail {
struct any_value {
  template <class T>
  constexpr operator T() const;  // never defined: only asks whether T{...} would compile
};
template <class S, class... A>
constexpr std::size_t aggregate_fields() {
  if constexpr (requires { S{A{}..., any_value{}}; }) return aggregate_fields<S, A..., any_value>();
  else return sizeof...(A);
}
}  // namespace detail

/// True when the adaptation names every field of the aggregate S (a field forgotten in
/// BOOST_HANA_ADAPT_STRUCT would otherwise be silently missing from hashes and metadata).
template <class S>
inline constexpr bool fields_complete = is_reflected<S> && detail::aggregate_fields<S>() == field_count<S>();

/// Calls f(name, field) for every field of s in declaration order (name: a null-terminated
/// const char*; field: a reference, const when s is). Usable in constant expressions.
template <class S, class F>
constexpr void for_each_field(S& s, F&& f) {
  using plain = std::remove_cv_t<S>;
  static_assert(is_reflected<plain>, "reflect: adapt the struct with BOOST_HANA_ADAPT_STRUCT(ns::type, fields...)");
  static_assert(fields_complete<plain>,
                "reflect: BOOST_HANA_ADAPT_STRUCT names fewer fields than the struct has: add the missing ones");
  boost::hana::for_each(boost::hana::accessors<plain>(), [&](auto pair) {
    f(boost::hana::to<const char*>(boost::hana::first(pair)), boost::hana::second(pair)(s));
  });
}

/// A field's value as text: integers in decimal, reals in the shortest form that reads back to
/// the same value, bools as true/false, enums as their integer, strings as they are, a wrapper
/// with a `value` member as its value.
template <class V>
std::string to_text(const V& v) {
  if constexpr (std::is_same_v<V, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_enum_v<V>) {
    return std::to_string(static_cast<std::underlying_type_t<V>>(v));
  } else if constexpr (std::is_integral_v<V>) {
    return std::to_string(v);
  } else if constexpr (std::is_floating_point_v<V>) {
    std::array<char, 64> buf{};
    auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);
    return ec == std::errc{} ? std::string(buf.data(), end) : std::string("?");
  } else if constexpr (std::is_convertible_v<const V&, std::string_view>) {
    return std::string(std::string_view(v));
  } else if constexpr (requires { v.value; }) {  // a wrapper of one value (a described setting)
    return to_text(v.value);
  } else if constexpr (requires { v.size(); v[0]; }) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + to_text(v[i]);
    return s + "]";
  } else {
    static_assert(sizeof(V) == 0, "reflect::to_text: no text form for this field type");
    return {};
  }
}

/// Every field of s as "prefix + name" → text (to_text): a checkpoint's metadata, a
/// data-parallel job's settings that every rank must share.
template <class S>
std::map<std::string, std::string> to_map(const S& s, std::string_view prefix = "") {
  std::map<std::string, std::string> m;
  for_each_field(s, [&](const char* name, const auto& v) { m[std::string(prefix) + name] = to_text(v); });
  return m;
}

/// The fields of s whose text differs from `recorded` (a map written by to_map with the same
/// prefix), one line each: "d_model: 64 in this program, 128 in <where>". A field missing
/// from `recorded` is listed too ("not recorded").
template <class S>
std::vector<std::string> differences(const S& s, const std::map<std::string, std::string>& recorded,
                                     std::string_view where, std::string_view prefix = "") {
  std::vector<std::string> out;
  for_each_field(s, [&](const char* name, const auto& v) {
    const std::string key = std::string(prefix) + name, here = to_text(v);
    auto it = recorded.find(key);
    if (it == recorded.end())
      out.push_back(key + ": " + here + " in this program, not recorded in " + std::string(where));
    else if (it->second != here)
      out.push_back(key + ": " + here + " in this program, " + it->second + " in " + std::string(where));
  });
  return out;
}

}  // namespace loom::reflect
