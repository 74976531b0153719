// The kernels' vector math (ops/vmath.hpp): lane_max (the row max of softmax, cross-entropy and
// fused attention), fold_lanes and lane_sum (the row sums of layer norm and others), and
// log_normal (the fused attention's row log-sum-exp in float).
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// fold_lanes (ops/vmath.hpp) adds 8 or 16 lanes in a documented order, so that a sum's bits
// depend on its length only: with 16, lane k + 8 onto lane k, then ((l0 + l1) + (l2 + l3)) +
// ((l4 + l5) + (l6 + l7)), then the tail. Here that order is written out on scalars and must
// give the same bits for lanes of mixed magnitudes and signs (where another order rounds
// differently: the first check makes sure the data can tell orders apart).
TEMPLATE_TEST_CASE("fold_lanes adds the lanes in the documented tree order, to the bit", "", float, double) {
  using T = TestType;
  std::uint32_t state = 12345;
  auto draw = [&] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  auto next = [&] {  // a full mantissa, magnitudes 2^-20 … 2^20, either sign
    const double u = (static_cast<double>(draw()) + static_cast<double>(draw()) / 4294967296.0) / 4294967296.0;
    const std::uint32_t r = draw();
    const T m = static_cast<T>(1 + u);
    return ((r >> 7) & 1 ? -m : m) * std::ldexp(T(1), static_cast<int>(r % 41) - 20);
  };
  auto tree8 = [](const T* l, T tail) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])) + tail; };
  int order_matters = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    T lane[16];
    for (T& x : lane) x = next();
    const T tail = next();
    T l8[8];
    for (int k = 0; k < 8; ++k) l8[k] = lane[k] + lane[k + 8];
    const T want16 = tree8(l8, tail), want8 = tree8(lane, tail);
    const T got16 = ops::fold_lanes<16>(lane, tail), got8 = ops::fold_lanes<8>(lane, tail);
    if (std::memcmp(&got16, &want16, sizeof(T)) != 0) FAIL("16 lanes, trial " << trial << ": " << got16 << " vs " << want16);
    if (std::memcmp(&got8, &want8, sizeof(T)) != 0) FAIL("8 lanes, trial " << trial << ": " << got8 << " vs " << want8);
    T left = tail;  // the same numbers added left to right
    for (int k = 0; k < 8; ++k) left += lane[k];
    order_matters += left != want8;
  }
  CHECK(order_matters > 100);
  // lane_sum: elements i and i + 16 share a lane, the last n mod 16 are the tail
  std::vector<T> x(37);
  for (T& v : x) v = next();
  T lane[16] = {}, tail = 0;
  for (int i = 0; i < 32; ++i) lane[i % 16] += x[static_cast<std::size_t>(i)];
  for (int i = 32; i < 37; ++i) tail += x[static_cast<std::size_t>(i)];
  const T want = ops::fold_lanes<16>(lane, tail), got = ops::lane_sum<16>(x.data(), 37);
  CHECK(std::memcmp(&got, &want, sizeof(T)) == 0);
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
