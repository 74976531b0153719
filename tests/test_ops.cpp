// Every primitive: forward values against numbers worked out by hand or by a naive reference,
// and backward against central finite differences (gradcheck, double) for each shape case.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../ops/vmath.hpp"
#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

// ---------------------------------------------------------------- matmul

namespace {
template <bool TA, bool TB, class SA, class SB>
void check_matmul(dims_t da, dims_t db) {
  auto a = input<"a", SA>();
  auto b = input<"b", SB>();
  auto g = make_graph(matmul<TA, TB>(a, b));
  param_store<double> p;
  auto as = test::random_tensor<double>(da, 11);
  auto bs = test::random_tensor<double>(db, 12);
  test::require_gradcheck(g, p, {{"a", as}, {"b", bs}});
}
// op(X) of one rank-2 slice as a plain row-major matrix
std::vector<double> op_of(const double* x, int rows, int cols, bool trans) {
  std::vector<double> r(static_cast<std::size_t>(rows * cols));
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      r[static_cast<std::size_t>(trans ? j * rows + i : i * cols + j)] = x[i * cols + j];
  return r;
}
}  // namespace

TEST_CASE("matmul computes batched products with transposes and shared operands") {
  // a [2, 3, 4] (TransA: stored [2, 4, 3]) · b [4, 5] shared
  auto a = input<"a", shape<fix<2>, fix<4>, fix<3>>>();
  auto b = input<"b", shape<fix<4>, fix<5>>>();
  auto g = make_graph(matmul<true, false>(a, b));
  param_store<double> p;
  auto run = g.executor<double>(p);
  auto as = test::random_tensor<double>({2, 4, 3}, 1);
  auto bs = test::random_tensor<double>({4, 5}, 2);
  run.forward({{"a", as}, {"b", bs}});
  auto c = run.output();
  REQUIRE(c.dims == dims_t{2, 3, 5});
  for (int batch = 0; batch < 2; ++batch) {
    auto a_op = op_of(as.data() + batch * 12, 4, 3, true);  // [3, 4]
    auto ref = test::naive_matmul(a_op.data(), bs.data(), 3, 4, 5);
    for (int e = 0; e < 15; ++e) CHECK(c[batch * 15 + e] == Approx(ref[static_cast<std::size_t>(e)]).epsilon(1e-12));
  }
}

TEST_CASE("matmul passes gradcheck for every layout") {
  SECTION("plain") { check_matmul<false, false, shape<fix<3>, fix<4>>, shape<fix<4>, fix<5>>>({3, 4}, {4, 5}); }
  SECTION("a transposed") { check_matmul<true, false, shape<fix<4>, fix<3>>, shape<fix<4>, fix<5>>>({4, 3}, {4, 5}); }
  SECTION("b transposed") { check_matmul<false, true, shape<fix<3>, fix<4>>, shape<fix<5>, fix<4>>>({3, 4}, {5, 4}); }
  SECTION("both transposed") { check_matmul<true, true, shape<fix<4>, fix<3>>, shape<fix<5>, fix<4>>>({4, 3}, {5, 4}); }
  SECTION("batched") {
    check_matmul<false, false, shape<fix<2>, fix<3>, fix<4>>, shape<fix<2>, fix<4>, fix<2>>>({2, 3, 4}, {2, 4, 2});
  }
  SECTION("batched, b transposed, 4-d") {
    check_matmul<false, true, shape<fix<2>, fix<2>, fix<3>, fix<4>>, shape<fix<2>, fix<2>, fix<5>, fix<4>>>(
        {2, 2, 3, 4}, {2, 2, 5, 4});
  }
  SECTION("b shared (a weight)") {
    check_matmul<false, false, shape<fix<2>, fix<3>, fix<4>>, shape<fix<4>, fix<2>>>({2, 3, 4}, {4, 2});
  }
  SECTION("b shared and transposed (nn.Linear)") {
    check_matmul<false, true, shape<fix<2>, fix<3>, fix<4>>, shape<fix<2>, fix<4>>>({2, 3, 4}, {2, 4});
  }
  SECTION("a transposed, b shared") {
    check_matmul<true, true, shape<fix<2>, fix<4>, fix<3>>, shape<fix<2>, fix<4>>>({2, 4, 3}, {2, 4});
  }
  SECTION("a shared") {
    check_matmul<false, false, shape<fix<3>, fix<4>>, shape<fix<2>, fix<4>, fix<2>>>({3, 4}, {2, 4, 2});
  }
  SECTION("a shared and transposed") {
    check_matmul<true, true, shape<fix<4>, fix<3>>, shape<fix<2>, fix<2>, fix<4>>>({4, 3}, {2, 2, 4});
  }
}

TEST_CASE("matmul splits large products into row chunks without changing the result") {
  // 300 rows × a shared weight: several row chunks; compare with the naive product
  auto a = input<"a", shape<dyn<"B">, dyn<"T">, fix<64>>>();
  auto b = input<"b", shape<fix<64>, fix<48>>>();
  auto g = make_graph(matmul(a, b));
  param_store<double> p;
  auto run = g.executor<double>(p, {.threads = 2});
  auto as = test::random_tensor<double>({3, 100, 64}, 5);
  auto bs = test::random_tensor<double>({64, 48}, 6);
  run.forward({{"a", as}, {"b", bs}});
  auto ref = test::naive_matmul(as.data(), bs.data(), 300, 64, 48);
  double worst = 0;
  for (std::size_t e = 0; e < ref.size(); ++e)
    worst = std::max(worst, std::abs(run.output()[static_cast<std::int64_t>(e)] - ref[e]));
  CHECK(worst < 1e-12);
}

// ---------------------------------------------------------------- scale, add, sum

TEST_CASE("scale multiplies by its constant and passes gradcheck") {
  auto x = input<"x", shape<dyn<"T">, fix<3>>>();
  auto g = make_graph(scale<-0.75>(x));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({1, 3}, {1, -2, 4});
  run.forward({{"x", xs}});
  CHECK(run.output()[0] == -0.75);
  CHECK(run.output()[1] == 1.5);
  CHECK(run.output()[2] == -3.0);
  auto xr = test::random_tensor<double>({3, 3}, 3);
  test::require_gradcheck(g, p, {{"x", xr}});
}

TEST_CASE("add broadcasts a suffix-shaped operand and passes gradcheck") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<3>>>();
  auto b = input<"b", shape<fix<3>>>();
  auto e = input<"e", shape<dyn<"T">, fix<3>>>();
  auto g = make_graph(add(add(x, b), e));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({2, 1, 3}, {1, 2, 3, 4, 5, 6}), bs({3}, {10, 20, 30}), es({1, 3}, {100, 200, 300});
  run.forward({{"x", xs}, {"b", bs}, {"e", es}});
  std::vector<double> expect{111, 222, 333, 114, 225, 336};
  for (int i = 0; i < 6; ++i) CHECK(run.output()[i] == expect[static_cast<std::size_t>(i)]);
  test::require_gradcheck(g, p,
                          {{"x", test::random_tensor<double>({2, 3, 3}, 1)},
                           {"b", test::random_tensor<double>({3}, 2)},
                           {"e", test::random_tensor<double>({3, 3}, 3)}});
}

TEST_CASE("sum adds every element and passes gradcheck") {
  auto x = input<"x", shape<fix<2>, fix<2>>>();
  auto g = make_graph(sum(x));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({2, 2}, {1, 2, 3, 4.5});
  run.forward({{"x", xs}});
  CHECK(run.output()[0] == 10.5);
  test::require_gradcheck(g, p, {{"x", xs}});
}

// ---------------------------------------------------------------- softmax

// lane_max (ops/vmath.hpp) is the max of softmax, cross-entropy and fused attention rows: two
// vectors of 32 bytes in flight, then a scalar tail. Every length from 1 to 70 (whole pairs of
// vectors, one vector more, tails of every size), the largest element at every position.
TEMPLATE_TEST_CASE("lane_max finds the largest element at any position and length; −∞ stays, NaN is skipped", "",
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

TEST_CASE("softmax of scores at ±1e4 does not overflow") {
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  auto g = make_graph(softmax(x));
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> xs({2, 3}, {1e4f, 0, -1e4f, 1e4f, 1e4f, -1e4f});
  run.forward({{"x", xs}});
  auto y = run.output();
  CHECK(y[0] == 1.0f);
  CHECK(y[1] == 0.0f);
  CHECK(y[2] == 0.0f);
  CHECK(y[3] == 0.5f);
  CHECK(y[4] == 0.5f);
  CHECK(y[5] == 0.0f);
}

TEST_CASE("softmax matches exp(x) / sum exp(x) and passes gradcheck") {
  auto x = input<"x", shape<dyn<"R">, fix<3>>>();
  auto g = make_graph(softmax(x));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({1, 3}, {1, 2, 3});
  run.forward({{"x", xs}});
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  for (int j = 0; j < 3; ++j) CHECK(run.output()[j] == Approx(std::exp(j + 1.0) / z).epsilon(1e-14));
  test::require_gradcheck(g, p, {{"x", test::random_tensor<double>({4, 3}, 9, -3, 3)}});
}

// ---------------------------------------------------------------- masks

TEST_CASE("softmax of a fully masked row is zero, not NaN") {
  // causal with S < T: query 0 sees keys j <= 0 + (S - T) = -1, i.e. none
  auto x = input<"x", shape<fix<3>, fix<2>>>();
  auto g = make_graph(softmax(mask_causal(x)));
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  auto xs = test::random_tensor<double>({3, 2}, 4);
  run.forward({{"x", xs}});
  CHECK(run.output()[0] == 0.0);
  CHECK(run.output()[1] == 0.0);
  CHECK(run.output()[2] == 1.0);  // query 1 sees key 0 only
  CHECK(run.output()[3] == 0.0);
  run.backward(std::vector<tensor<double>>{test::random_tensor<double>({3, 2}, 5)});
  for (std::int64_t i = 0; i < 6; ++i) CHECK(std::isfinite(run.input_grad("x")[i]));
  test::require_gradcheck(g, p, {{"x", xs}});
}

TEST_CASE("the causal mask is offset by S - T for cached decoding") {
  auto x = input<"x", shape<dyn<"T">, dyn<"S">>>();
  auto g = make_graph(mask_causal(x));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({2, 4});  // T = 2 new queries after P = 2 cached keys
  run.forward({{"x", xs}});
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> expect{0, 0, 0, -inf, 0, 0, 0, 0};  // query 0 at position 2 sees keys 0..2
  for (int i = 0; i < 8; ++i) CHECK(run.output()[i] == expect[static_cast<std::size_t>(i)]);
}

TEST_CASE("masks pass gradcheck through softmax: causal, padding, boolean; S != T; batch and heads") {
  param_store<double> p;
  SECTION("causal, square") {
    auto x = input<"x", shape<fix<2>, fix<2>, fix<4>, fix<4>>>();
    test::require_gradcheck(make_graph(softmax(mask_causal(x))), p, {{"x", test::random_tensor<double>({2, 2, 4, 4}, 1)}});
  }
  SECTION("causal, one decode row (T = 1, offset S - 1)") {
    auto x = input<"x", shape<fix<2>, fix<1>, fix<5>>>();
    test::require_gradcheck(make_graph(softmax(mask_causal(x))), p, {{"x", test::random_tensor<double>({2, 1, 5}, 2)}});
  }
  SECTION("padding, B = 3, S != T") {
    auto x = input<"x", shape<fix<3>, fix<2>, fix<3>, fix<5>>>();
    auto len = input<"len", shape<fix<3>>, int>();
    tensor<std::int32_t> lens({3}, {5, 2, 0});
    test::require_gradcheck(make_graph(softmax(mask_padding(x, len))), p,
                            {{"x", test::random_tensor<double>({3, 2, 3, 5}, 3)}, {"len", lens}});
  }
  SECTION("boolean, broadcast over batch and heads") {
    auto x = input<"x", shape<fix<2>, fix<2>, fix<3>, fix<4>>>();
    auto m = input<"m", shape<fix<2>, fix<1>, fix<3>, fix<4>>, bool>();
    tensor<std::uint8_t> ms({2, 1, 3, 4}, {1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0});
    test::require_gradcheck(make_graph(softmax(mask_bool(x, m))), p,
                            {{"x", test::random_tensor<double>({2, 2, 3, 4}, 4)}, {"m", ms}});
  }
}

TEST_CASE("padding and boolean masks hide exactly the keys they name") {
  const double inf = std::numeric_limits<double>::infinity();
  SECTION("padding") {
    auto x = input<"x", shape<fix<2>, fix<1>, fix<3>>>();
    auto len = input<"len", shape<fix<2>>, int>();
    auto g = make_graph(mask_padding(x, len));
    param_store<double> p;
    auto run = g.executor<double>(p);
    tensor<double> xs({2, 1, 3}, {1, 2, 3, 4, 5, 6});
    tensor<std::int32_t> lens({2}, {1, 3});
    run.forward({{"x", xs}, {"len", lens}});
    std::vector<double> expect{1, -inf, -inf, 4, 5, 6};
    for (int i = 0; i < 6; ++i) CHECK(run.output()[i] == expect[static_cast<std::size_t>(i)]);
  }
  SECTION("boolean (true may attend)") {
    auto x = input<"x", shape<fix<2>, fix<2>>>();
    auto m = input<"m", shape<fix<1>, fix<2>>, bool>();
    auto g = make_graph(mask_bool(x, m));
    param_store<double> p;
    auto run = g.executor<double>(p);
    tensor<double> xs({2, 2}, {1, 2, 3, 4});
    tensor<std::uint8_t> ms({1, 2}, {0, 1});
    run.forward({{"x", xs}, {"m", ms}});
    std::vector<double> expect{-inf, 2, -inf, 4};
    for (int i = 0; i < 4; ++i) CHECK(run.output()[i] == expect[static_cast<std::size_t>(i)]);
  }
}

// ---------------------------------------------------------------- concat, slice, split

TEST_CASE("concat joins along heads and along time, and passes gradcheck") {
  param_store<double> p;
  SECTION("time (the KV cache: P + T)") {
    auto past = input<"past", shape<fix<1>, fix<2>, dyn<"P">, fix<3>>>();
    auto now = input<"now", shape<fix<1>, fix<2>, dyn<"T">, fix<3>>>();
    auto g = make_graph(concat<2>(past, now));
    auto run = g.executor<double>(p);
    auto ps = test::random_tensor<double>({1, 2, 2, 3}, 1);
    auto ns = test::random_tensor<double>({1, 2, 1, 3}, 2);
    run.forward({{"past", ps}, {"now", ns}});
    REQUIRE(run.output().dims == dims_t{1, 2, 3, 3});
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < 3; ++t)
        for (int d = 0; d < 3; ++d)
          CHECK(run.output().at({0, h, t, d}) == (t < 2 ? ps.at({0, h, t, d}) : ns.at({0, h, 0, d})));
    test::require_gradcheck(g, p, {{"past", ps}, {"now", ns}});
  }
  SECTION("heads, three operands, last axis") {
    auto a = input<"a", shape<fix<2>, fix<3>, fix<2>>>();
    auto b = input<"b", shape<fix<2>, fix<3>, fix<1>>>();
    auto c = input<"c", shape<fix<2>, fix<3>, fix<3>>>();
    auto g = make_graph(concat<-1>(a, b, c));
    static_assert(std::is_same_v<decltype(concat<-1>(a, b, c))::shape, shape<fix<2>, fix<3>, fix<6>>>);
    test::require_gradcheck(g, p,
                            {{"a", test::random_tensor<double>({2, 3, 2}, 1)},
                             {"b", test::random_tensor<double>({2, 3, 1}, 2)},
                             {"c", test::random_tensor<double>({2, 3, 3}, 3)}});
  }
}

TEST_CASE("slice and split cut an axis into parts and pass gradcheck") {
  auto x = input<"x", shape<fix<2>, fix<6>>>();
  auto [a, b, c] = split<-1, 3>(x);
  auto g = make_graph(b);
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({2, 6}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  run.forward({{"x", xs}});
  std::vector<double> expect{2, 3, 8, 9};
  for (int i = 0; i < 4; ++i) CHECK(run.output()[i] == expect[static_cast<std::size_t>(i)]);
  // all three parts recombined with different weights
  auto g2 = make_graph(add(add(scale<1.0>(a), scale<2.0>(b)), scale<3.0>(c)));
  test::require_gradcheck(g2, p, {{"x", test::random_tensor<double>({2, 6}, 4)}});
  // a slice along a dynamic axis
  auto y = input<"y", shape<dyn<"T">, fix<2>>>();
  auto g3 = make_graph(slice<0, fix<1>, fix<2>>(y));
  test::require_gradcheck(g3, p, {{"y", test::random_tensor<double>({4, 2}, 5)}});
}

// ---------------------------------------------------------------- reshape, transpose

TEST_CASE("reshape and transpose split heads as expected and pass gradcheck") {
  // [B=1, T=2, D=4] -> [1, 2, H=2, 2] -> [1, H, T, 2]
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto heads = transpose<0, 2, 1, 3>(reshape<shape<dyn<"B">, dyn<"T">, fix<2>, fix<2>>>(x));
  auto g = make_graph(heads);
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({1, 2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  run.forward({{"x", xs}});
  // head 0 holds features 0,1 of each step; head 1 features 2,3
  std::vector<double> expect{0, 1, 4, 5, 2, 3, 6, 7};
  for (int i = 0; i < 8; ++i) CHECK(run.output()[i] == expect[static_cast<std::size_t>(i)]);
  test::require_gradcheck(g, p, {{"x", test::random_tensor<double>({2, 3, 4}, 6)}});
  auto y = input<"y", shape<fix<2>, fix<3>, fix<4>>>();
  test::require_gradcheck(make_graph(transpose<2, 0, 1>(y)), p, {{"y", test::random_tensor<double>({2, 3, 4}, 7)}});
}
