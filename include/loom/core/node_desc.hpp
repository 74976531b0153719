// node_desc: the compile-time description of one graph node, as plain data.
//
// Every node type has one `desc_of<Node>`, a constexpr object that names its op, its
// attributes, its result shape and (by address) its inputs. The plan (graph/plan.hpp) is
// computed from these descriptors by constexpr functions over arrays, and the executor runs
// from them at run time; no executor or kernel code is instantiated per node type.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>

#include "loom/core/dims.hpp"
#include "loom/core/fnv.hpp"
#include "loom/core/op_entry.hpp"
#include "loom/core/reflect.hpp"

namespace loom {

/// Element type of a node's values. Computed nodes and most inputs hold `real` (the
/// executor's scalar type: float or double); token ids and lengths are i32; masks are u8.
enum class dtype : std::uint8_t { real, i32, u8 };

constexpr std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::real: return "real";
    case dtype::i32: return "int32";
    case dtype::u8: return "uint8";
  }
  return "?";
}

/// How a parameter is initialised by graph::init_params (PyTorch's defaults for the layer
/// that owns it).
enum class init_kind : std::uint8_t {
  zeros,
  ones,
  normal,          // N(0, 1) — nn.Embedding
  linear_weight,   // U(-1/sqrt(in), 1/sqrt(in)) — nn.Linear.weight (kaiming_uniform a=sqrt 5)
  linear_bias,     // U(-1/sqrt(in), 1/sqrt(in)) with in = fan_in given in init_arg
  xavier_uniform,  // U(-a, a), a = sqrt(6 / (fan_in + fan_out)) — MHA in_proj_weight
  normal_std,      // N(0, σ²), σ = init_arg / 1000 — Hugging Face's initializer_range (20: 0.02)
};

struct node_desc {
  const op_entry* op = nullptr;  // what the node is (role, name, kernels, traits)
  dtype elem = dtype::real;
  std::string_view name{};  // inputs, params and named outputs: their name; other ops: nothing
  int rank = 0;
  std::array<dim_expr, max_rank> dims{};
  std::span<const node_desc* const> inputs{};
  // the op's attributes, written and read through its typed attribute struct (store_attrs,
  // load_attrs): integers and flags, reals, and dims (bound at run time: slice begin and size)
  std::array<long, 8> iattr{};
  std::array<double, 2> fattr{};
  std::array<dim_expr, 2> dattr{};
  init_kind init = init_kind::zeros;
  std::uint64_t hash = 0;           // structural hash; identical nodes are one object anyway
  const void* fused = nullptr;      // a fused node (made by a plan rewrite): its parameters
  /// The attributes as "name=value" lines (DOT labels, messages), from their struct's
  /// reflection; null when the node has none.
  std::string (*attrs_text)(const node_desc&) = nullptr;
};

namespace detail {
constexpr std::uint64_t fnv(std::uint64_t h, std::uint64_t v) {
  return ::loom::fnv::add_word(h, v);
}
constexpr std::uint64_t fnv(std::uint64_t h, std::string_view s) {
  return ::loom::fnv::add_word(::loom::fnv::add(h, s), s.size());
}
constexpr std::uint64_t fnv(std::uint64_t h, const dim_expr& d) {
  h = fnv(h, static_cast<std::uint64_t>(d.constant));
  for (int i = 0; i < d.n_syms; ++i) h = fnv(h, d.syms[i]);
  return h;
}
constexpr std::uint64_t hash_desc(const node_desc& d) {
  std::uint64_t h = ::loom::fnv::start;
  h = fnv(h, static_cast<std::uint64_t>(d.op->id));
  h = fnv(h, static_cast<std::uint64_t>(d.elem));
  h = fnv(h, d.name);
  for (int i = 0; i < d.rank; ++i) h = fnv(h, d.dims[i]);
  for (const node_desc* in : d.inputs) h = fnv(h, in->hash);
  for (long a : d.iattr) h = fnv(h, static_cast<std::uint64_t>(a));
  for (double f : d.fattr) h = fnv(h, std::bit_cast<std::uint64_t>(f));
  for (const auto& e : d.dattr) h = fnv(h, e);
  h = fnv(h, static_cast<std::uint64_t>(d.init));
  return h;
}
}  // namespace detail

// ---- typed attributes ----
//
// An op's attributes are a plain struct with named fields (bool, int, long, double, dim_expr, or
// a std::array<long, N>), adapted for reflection once after it:
//   struct scale_attrs { double factor = 1; };
//   BOOST_HANA_ADAPT_STRUCT(loom::scale_attrs, factor);     // at global scope
// store_attrs writes the fields into a descriptor's slots in that order (so they are part of
// the node's structural hash); load_attrs reads them back; attrs_text names them for DOT.
namespace detail {
struct attr_writer {
  node_desc& d;
  std::size_t ni = 0, nf = 0, nd = 0;
  constexpr void operator()(bool v) { d.iattr[ni++] = v; }
  constexpr void operator()(int v) { d.iattr[ni++] = v; }
  constexpr void operator()(long v) { d.iattr[ni++] = v; }
  constexpr void operator()(double v) { d.fattr[nf++] = v; }
  constexpr void operator()(const dim_expr& v) { d.dattr[nd++] = v; }
  template <std::size_t N>
  constexpr void operator()(const std::array<long, N>& v) {
    for (long x : v) d.iattr[ni++] = x;
  }
};
struct attr_reader {
  const node_desc& d;
  std::size_t ni = 0, nf = 0, nd = 0;
  constexpr void operator()(bool& v) { v = d.iattr[ni++] != 0; }
  constexpr void operator()(int& v) { v = static_cast<int>(d.iattr[ni++]); }
  constexpr void operator()(long& v) { v = d.iattr[ni++]; }
  constexpr void operator()(double& v) { v = d.fattr[nf++]; }
  constexpr void operator()(dim_expr& v) { v = d.dattr[nd++]; }
  template <std::size_t N>
  constexpr void operator()(std::array<long, N>& v) {
    for (long& x : v) x = d.iattr[ni++];
  }
};
inline std::string dim_text(const dim_expr& e) {
  std::string s;
  for (int k = 0; k < e.n_syms; ++k) s += (k ? " + " : "") + std::string(e.syms[static_cast<std::size_t>(k)]);
  if (e.constant != 0 || e.n_syms == 0) s += (e.n_syms ? " + " : "") + std::to_string(e.constant);
  return s;
}
}  // namespace detail

/// Writes the attributes `a` into d's slots (see above).
template <class A>
constexpr void store_attrs(node_desc& d, A a) {
  detail::attr_writer w{d};
  if constexpr (requires { a.fields(); }) std::apply([&](auto&... f) { (w(f), ...); }, a.fields());  // transition
  else reflect::for_each_field(a, [&](const char*, const auto& v) { w(v); });
}

/// The attributes of type A stored in d by store_attrs.
template <class A>
constexpr A load_attrs(const node_desc& d) {
  A a{};
  detail::attr_reader r{d};
  if constexpr (requires { a.fields(); }) std::apply([&](auto&... f) { (r(f), ...); }, a.fields());  // transition
  else reflect::for_each_field(a, [&](const char*, auto& v) { r(v); });
  return a;
}

namespace detail {
/// d's attributes of type A as "name=value" lines joined by "\n" (see node_desc::attrs_text).
template <class A>
std::string attrs_text(const node_desc& d) {
  const A a = load_attrs<A>(d);
  std::string s;
  reflect::for_each_field(a, [&](const char* name, const auto& v) {
    s += s.empty() ? "" : "\n";
    s += name;
    s += '=';
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(v)>, dim_expr>) s += dim_text(v);
    else s += reflect::to_text(v);
  });
  return s;
}
}  // namespace detail

}  // namespace loom
