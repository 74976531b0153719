// The kernels' vector math (ops/vmath.hpp): lane_max (the row max of softmax, cross-entropy and
// fused attention) and log_normal (the fused attention's row log-sum-exp in float).
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../../ops/vmath.hpp"

using namespace loom;

// lane_max (ops/vmath.hpp) is the max of softmax, cross-entropy and fused attention rows: two
// vectors of 32 bytes in flight, then a scalar tail. Every length from 1 to 70 (whole pairs of
// vectors, one vector more, tails of every size), the largest element at every position.
TEMPLATE_TEST_CASE("lane_max finds the largest element at any position and length, −∞ stays, NaN is skipped", "",
                   float, double) {
  using T = TestType;
  const T inf = std::numeric_limits<T>::infinity();
  for (std::int64_t n = 1; n <= 70; ++n) {
    std::vector<T> x(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<T>(-100 + (i * 37) % 50);
    for (std::int64_t at = 0; at < n; ++at) {
      std::vector<T> y = x;
      y[static_cast<std::size_t>(at)] = T(7);  // larger than every other element (all ≤ −51)
      if (ops::lane_max(y.data(), n) != T(7)) FAIL("n = " << n << ", largest at " << at);
    }
    std::vector<T> masked(static_cast<std::size_t>(n), -inf);
    CHECK(ops::lane_max(masked.data(), n) == -inf);
    std::vector<T> nan = x;
    nan[static_cast<std::size_t>(n / 2)] = std::numeric_limits<T>::quiet_NaN();
    T expect = -inf;
    for (std::int64_t i = 0; i < n; ++i)
      if (i != n / 2) expect = std::max(expect, x[static_cast<std::size_t>(i)]);
    CHECK(ops::lane_max(nan.data(), n) == expect);
  }
}

// log_normal (ops/vmath.hpp) is the fused attention's row log-sum-exp in float: ln x without a
// libm call, for positive normal x, as a float and in every lane of a vector. Against ln x
// computed in double and rounded: every float in [1, 4) (the mantissa ranges both sides of √2
// and of the exponent step), every 97th float across the whole normal range, the edges.
TEST_CASE("log_normal is within 2 ulp of the rounded ln x over every positive normal float, scalar and vector") {
  auto ulps = [](float got, float x) {
    const float want = static_cast<float>(std::log(static_cast<double>(x)));
    if (got == want) return 0.0;
    const float ulp = std::nextafter(std::abs(want), std::numeric_limits<float>::infinity()) - std::abs(want);
    return std::abs(static_cast<double>(got) - static_cast<double>(want)) / static_cast<double>(ulp);
  };
  double worst = 0;
  float worst_at = 0;
  auto check = [&](float x) {
    const double e = ulps(ops::log_normal(x), x);
    if (e > worst) {
      worst = e;
      worst_at = x;
    }
  };
  for (float x = 1.0f; x < 4.0f; x = std::nextafter(x, 5.0f)) check(x);
  const auto lo = std::bit_cast<std::uint32_t>(std::numeric_limits<float>::min());
  const auto hi = std::bit_cast<std::uint32_t>(std::numeric_limits<float>::max());
  for (std::uint32_t b = lo; b <= hi - 97; b += 97) check(std::bit_cast<float>(b));
  for (float x : {std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), 0.5f, 0.70710677f, 0.70710683f,
                  1.4142135f, 1.4142137f, 1e-30f, 3e38f})
    check(x);
  INFO("worst " << worst << " ulp at " << worst_at);
  CHECK(worst <= 2.0);
  CHECK(ops::log_normal(1.0f) == 0.0f);
  // the vector form computes every lane alike (four lanes: the baseline ISA's vector)
  typedef float v4 __attribute__((vector_size(16)));
  for (float base : {0.37f, 1.0f, 3e-20f, 7e30f}) {
    v4 x;
    for (int i = 0; i < 4; ++i) x[i] = base * (1.0f + 11.3f * static_cast<float>(i * i));
    const v4 y = ops::log_normal(x);
    for (int i = 0; i < 4; ++i) CHECK(ulps(y[i], x[i]) <= 2.0);
  }
}
