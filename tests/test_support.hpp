// Helpers shared by the tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "loom/loom.hpp"

namespace test {

/// A tensor of seeded uniform(-1, 1) values (or [lo, hi)).
template <class T>
loom::tensor<T> random_tensor(loom::dims_t dims, std::uint64_t seed, double lo = -1, double hi = 1) {
  loom::rng gen(seed);
  loom::tensor<T> t(dims);
  for (std::int64_t i = 0; i < t.size(); ++i) t[i] = static_cast<T>(gen.uniform(lo, hi));
  return t;
}

/// Fills every parameter of the store with seeded uniform(-1, 1) values.
template <class T>
void randomize(loom::param_store<T>& store, std::uint64_t seed) {
  loom::rng gen(seed);
  for (auto& [name, e] : store)
    for (auto& v : e.value.values()) v = static_cast<T>(gen.uniform(-1, 1));
}

}  // namespace test

#include <catch2/catch.hpp>

#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace test {

/// Runs gradcheck (double, PyTorch's tolerances) and requires it to pass, printing the worst
/// element otherwise.
template <class Graph>
void require_gradcheck(const Graph& g, loom::param_store<double>& params, std::initializer_list<loom::feed> feeds,
                       loom::gradcheck_options options = {}) {
  auto r = loom::gradcheck(g, params, feeds, options);
  INFO(r.str());
  REQUIRE(r.checked > 0);
  REQUIRE(r.ok);
}

/// The message of the exception fn() throws, or "(no exception)".
template <class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

/// Same shape and the same bytes.
template <class T>
bool same_bits(const loom::tensor<T>& a, const loom::tensor<T>& b) {
  // (an empty tensor's data() may be null: memcmp must not see it)
  return a.dims() == b.dims() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), sizeof(T) * static_cast<std::size_t>(a.size())) == 0);
}

/// The same length and the same bytes.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// The same parameter names, each with the same bytes.
template <class T>
bool same_values(const loom::param_store<T>& a, const loom::param_store<T>& b) {
  if (a.names() != b.names()) return false;
  for (const auto& name : a.names())
    if (!same_bits(a.value(name), b.value(name))) return false;
  return true;
}

/// Naive reference matmul of row-major [m, k] x [k, n].
inline std::vector<double> naive_matmul(const double* a, const double* b, int m, int k, int n) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int l = 0; l < k; ++l) c[static_cast<std::size_t>(i * n + j)] += a[i * k + l] * b[l * n + j];
  return c;
}

/// The largest |a[i] − b[i]| over the largest |b[i]| (the difference itself when b is all
/// zeros). Throws std::invalid_argument when the lengths differ.
inline double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("max_rel: vectors of different lengths");
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

/// The op of every node of a plan (count(name): how many nodes run it).
inline std::multiset<std::string_view> ops_of(const loom::plan_view& plan) {
  std::multiset<std::string_view> ops;
  for (int i = 0; i < plan.size(); ++i) ops.insert(plan.order[i]->op->name);
  return ops;
}

}  // namespace test
