// Helpers shared by the op tests (tests/ops/, one file per op) and the layer tests: int feeds,
// and the comparisons with expected numbers, one namespace per kind of expected number.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "loom/loom.hpp"

namespace op_test {

using tokens_t = loom::tensor<std::int32_t>;

/// The seed input of dropout: [2] ints.
inline tokens_t seed_of(std::int32_t seed, std::int32_t step) {
  return tokens_t({2}, {seed, step});
}

/// Positions [B, T]: sequence b starts at offsets[b].
inline tokens_t positions_from(const std::vector<std::int32_t>& offsets, std::int32_t t) {
  std::vector<std::int32_t> p;
  for (std::int32_t o : offsets)
    for (std::int32_t s = 0; s < t; ++s) p.push_back(o + s);
  return tokens_t({static_cast<std::int64_t>(offsets.size()), t}, p);
}

template <class T>
std::vector<T> copy_of(loom::tensor_view<const T> v) {
  return {v.data, v.data + v.size()};
}
template <class T>
std::vector<T> copy_of(const loom::tensor<T>& t) {
  return {t.data(), t.data() + t.size()};
}

/// Numbers computed with PyTorch 1.13 or worked by hand, given to 10 decimals (the layers' ops).
namespace decimals {

// Agreement expected with reference numbers given to 10 decimals: float or double rounding.
template <class T>
inline constexpr double tolerance = std::is_same_v<T, float> ? 2e-6 : 1e-9;

// every element of `got` within `tol` of `expect`
template <class V>
void check_values(const V& got, const std::vector<double>& expect, double tol = 1e-9) {
  REQUIRE(got.size() == static_cast<std::int64_t>(expect.size()));
  for (std::size_t i = 0; i < expect.size(); ++i) {
    INFO("element " << i);
    CHECK(static_cast<double>(got[static_cast<std::int64_t>(i)]) == Approx(expect[i]).epsilon(0).margin(tol));
  }
}

}  // namespace decimals

/// Closed forms and sums worked out by hand, exact up to rounding (the element-wise and
/// reduction ops).
namespace closed_forms {

template <class T>
Approx near(double v) {
  return Approx(v).epsilon(std::is_same_v<T, float> ? 1e-6 : 1e-13).margin(std::is_same_v<T, float> ? 1e-7 : 1e-15);
}

/// The output of graph g (one real input "x") for x = xs.
template <class T, class G>
std::vector<T> run_on(const G& g, const loom::tensor<T>& xs) {
  loom::param_store<T> none;
  auto ex = g.template executor<T>(none);
  ex.forward({{"x", xs}});
  auto y = ex.output();
  return {y.data, y.data + y.dims.size()};
}

/// The values expected of a view, element by element.
template <class T, class V>
void check_values(const V& got, const std::vector<double>& want) {
  REQUIRE(got.dims.size() == static_cast<std::int64_t>(want.size()));
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(got.data[i] == near<T>(want[i]));
  }
}

}  // namespace closed_forms

/// A naive double implementation written in the test from the op's formula (the decoders' ops).
namespace double_reference {

// Agreement with a double reference: float rounding (values of order 1) or double rounding.
template <class T>
inline constexpr double tolerance = std::is_same_v<T, float> ? 2e-6 : 1e-12;

template <class T>
std::vector<double> doubles(loom::tensor_view<const T> v) {
  return {v.data, v.data + v.size()};
}
template <class T>
std::vector<double> doubles(const loom::tensor<T>& t) {
  return {t.data(), t.data() + t.size()};
}

inline void check_near(const std::vector<double>& got, const std::vector<double>& expect, double tol) {
  REQUIRE(got.size() == expect.size());
  for (std::size_t i = 0; i < expect.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " against " << expect[i]);
    CHECK(std::abs(got[i] - expect[i]) <= tol * (1 + std::abs(expect[i])));
  }
}

}  // namespace double_reference

}  // namespace op_test
