// The element-wise and reduction ops (unary.hpp, binary.hpp, where.hpp, reduction.hpp) and the
// pointwise helper: forward values against closed forms and numbers worked out by hand,
// gradients against hand-computed values at ties and kinks and against central finite
// differences (gradcheck, double) elsewhere; and two layers written as compositions of them
// (RMSNorm, masked mean pooling).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

/// softsign(x) = x / (1 + |x|), a user's pointwise op made with the public helper.
struct softsign_op : pointwise<softsign_op> {
  static constexpr std::string_view name = "softsign";
  template <class T>
  static T f(T x) {
    return x / (1 + std::abs(x));
  }
  template <class T>
  static T df(T x, T /*y*/) {
    return 1 / ((1 + std::abs(x)) * (1 + std::abs(x)));
  }
};
inline constexpr op_fn<softsign_op> softsign{};

template <class T>
Approx near(double v) {
  return Approx(v).epsilon(std::is_same_v<T, float> ? 1e-6 : 1e-13).margin(std::is_same_v<T, float> ? 1e-7 : 1e-15);
}

/// The output of graph g (one real input "x") for x = xs.
template <class T, class G>
std::vector<T> run_on(const G& g, const tensor<T>& xs) {
  param_store<T> none;
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

// ln 2, ln 3, e: the inputs whose images are round numbers
constexpr double ln2 = 0.69314718055994530942, ln3 = 1.09861228866810969140, e = 2.71828182845904523536;

}  // namespace

// ---------------------------------------------------------------- unary

TEMPLATE_TEST_CASE("unary ops match their closed forms", "", float, double) {
  using T = TestType;
  auto x = input<"x", shape<fix<4>>>();
  auto t = [](std::vector<double> v) {
    return tensor<T>({4}, std::vector<T>(v.begin(), v.end()));
  };
  auto check = [](const std::vector<T>& got, const std::vector<double>& want) {
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == near<T>(want[i]));
  };
  check(run_on(make_graph(neg(x)), t({1, -2, 0, 3.5})), {-1, 2, 0, -3.5});
  check(run_on(make_graph(-x), t({1, -2, 0, 3.5})), {-1, 2, 0, -3.5});
  check(run_on(make_graph(loom::exp(x)), t({0, 1, ln3, -ln2})), {1, e, 3, 0.5});
  check(run_on(make_graph(loom::log(x)), t({1, e, 8, 0.25})), {0, 1, 3 * ln2, -2 * ln2});
  check(run_on(make_graph(loom::sqrt(x)), t({0, 2.25, 16, 0.01})), {0, 1.5, 4, 0.1});
  check(run_on(make_graph(rsqrt(x)), t({4, 0.25, 1, 100})), {0.5, 2, 1, 0.1});
  // tanh(ln a) = (a² − 1) / (a² + 1)
  check(run_on(make_graph(loom::tanh(x)), t({0, ln2, -ln3, ln3})), {0, 0.6, -0.8, 0.8});
  // sigmoid(ln a) = a / (1 + a)
  check(run_on(make_graph(sigmoid(x)), t({0, ln3, -ln3, 2 * ln3})), {0.5, 0.75, 0.25, 0.9});
  check(run_on(make_graph(loom::abs(x)), t({-2, 0, 3.5, -0.25})), {2, 0, 3.5, 0.25});
  check(run_on(make_graph(square(x)), t({-2, 0, 3.5, -0.25})), {4, 0, 12.25, 0.0625});
}

TEST_CASE("unary ops keep the shape, named dims included") {
  auto x = input<"x", shape<dyn<"B">, fix<3>>>();
  static_assert(std::is_same_v<decltype(loom::exp(x))::shape, shape<dyn<"B">, fix<3>>>);
  static_assert(std::is_same_v<decltype(-x)::shape, shape<dyn<"B">, fix<3>>>);
  static_assert(std::is_same_v<decltype(sigmoid(rsqrt(x)))::shape, shape<dyn<"B">, fix<3>>>);
  SUCCEED();
}

TEST_CASE("unary ops pass gradcheck, log, sqrt and rsqrt on positive inputs") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<3>>>();
  param_store<double> p;
  const auto any = test::random_tensor<double>({2, 4, 3}, 1, -2, 2);
  const auto positive = test::random_tensor<double>({2, 4, 3}, 2, 0.3, 3);
  SECTION("neg") { test::require_gradcheck(make_graph(-x), p, {{"x", any}}); }
  SECTION("exp") { test::require_gradcheck(make_graph(loom::exp(x)), p, {{"x", any}}); }
  SECTION("log") { test::require_gradcheck(make_graph(loom::log(x)), p, {{"x", positive}}); }
  SECTION("sqrt") { test::require_gradcheck(make_graph(loom::sqrt(x)), p, {{"x", positive}}); }
  SECTION("rsqrt") { test::require_gradcheck(make_graph(rsqrt(x)), p, {{"x", positive}}); }
  SECTION("tanh") { test::require_gradcheck(make_graph(loom::tanh(x)), p, {{"x", any}}); }
  SECTION("sigmoid") { test::require_gradcheck(make_graph(sigmoid(x)), p, {{"x", any}}); }
  SECTION("abs") { test::require_gradcheck(make_graph(loom::abs(x)), p, {{"x", positive}}); }
  SECTION("square") { test::require_gradcheck(make_graph(square(x)), p, {{"x", any}}); }
  SECTION("a chain: exp(−x²) · tanh(x)") {
    test::require_gradcheck(make_graph(loom::exp(-square(x)) * loom::tanh(x)), p, {{"x", any}});
  }
}

TEST_CASE("abs has gradient 0 at 0, as PyTorch, and ±1 elsewhere") {
  auto x = input<"x", shape<fix<3>>>();
  auto g = make_graph(sum(loom::abs(x)));
  param_store<double> p;
  auto ex = g.executor<double>(p, {.input_grads = true});
  ex.forward({{"x", tensor<double>({3}, {-2, 0, 0.5})}});
  ex.backward();
  check_values<double>(ex.input_grad("x"), {-1, 0, 1});
}

TEMPLATE_TEST_CASE("a user's pointwise op gets its forward, backward and traits from f and df", "", float, double) {
  using T = TestType;
  auto x = input<"x", shape<fix<3>>>();
  // softsign(x) = x / (1 + |x|): 1 → 1/2, −3 → −3/4, 0 → 0
  const auto y = run_on(make_graph(softsign(x)), tensor<T>({3}, {1, -3, 0}));
  CHECK(y[0] == near<T>(0.5));
  CHECK(y[1] == near<T>(-0.75));
  CHECK(y[2] == near<T>(0));
  static_assert(entry_of<softsign_op>.writes_fresh && entry_of<softsign_op>.backward_in_place);
  static_assert(entry_of<softsign_op>.backward_reads_input(0) && !entry_of<softsign_op>.backward_reads_output);
  static_assert(!entry_of<exp_op>.backward_reads_input(0) && entry_of<exp_op>.backward_reads_output);
  static_assert(entry_of<neg_op>.backward_reads == 0 && !entry_of<neg_op>.backward_reads_output);
  if constexpr (std::is_same_v<T, double>) {
    param_store<double> p;
    test::require_gradcheck(make_graph(softsign(x)), p, {{"x", tensor<double>({3}, {1, -3, 0.25})}});
  }
}

// ---------------------------------------------------------------- binary

TEMPLATE_TEST_CASE("sub, div, maximum and minimum broadcast [2, 1] against [3]", "", float, double) {
  using T = TestType;
  auto a = input<"a", shape<fix<2>, fix<1>>>();
  auto b = input<"b", shape<fix<3>>>();
  static_assert(std::is_same_v<decltype(a - b)::shape, shape<fix<2>, fix<3>>>);
  static_assert(std::is_same_v<decltype(loom::div(b, a))::shape, shape<fix<2>, fix<3>>>);
  const tensor<T> as({2, 1}, {2, -4}), bs({3}, {1, 4, -2});
  auto run = [&](auto g) {
    param_store<T> none;
    auto ex = g.template executor<T>(none);
    ex.forward({{"a", as}, {"b", bs}});
    return tensor<T>(ex.output());
  };
  // rows: a = 2, a = −4; columns: b = 1, 4, −2
  const auto d = run(make_graph(a - b));
  const auto q = run(make_graph(a / b));
  const auto hi = run(make_graph(maximum(a, b)));
  const auto lo = run(make_graph(minimum(b, a)));
  const std::vector<double> want_d{1, -2, 4, -5, -8, -2}, want_q{2, 0.5, -1, -4, -1, 2}, want_hi{2, 4, 2, 1, 4, -2},
      want_lo{1, 2, -2, -4, -4, -4};
  for (std::int64_t i = 0; i < 6; ++i) {
    INFO("element " << i);
    CHECK(d[i] == near<T>(want_d[static_cast<std::size_t>(i)]));
    CHECK(q[i] == near<T>(want_q[static_cast<std::size_t>(i)]));
    CHECK(hi[i] == near<T>(want_hi[static_cast<std::size_t>(i)]));
    CHECK(lo[i] == near<T>(want_lo[static_cast<std::size_t>(i)]));
  }
  CHECK(lo.dims() == dims_t{2, 3});
}

TEST_CASE("sub, div, maximum and minimum pass gradcheck with both operands broadcast") {
  auto a = input<"a", shape<fix<2>, fix<1>, fix<4>>>();
  auto b = input<"b", shape<fix<3>, fix<1>>>();
  param_store<double> p;
  const auto as = test::random_tensor<double>({2, 1, 4}, 3), bs = test::random_tensor<double>({3, 1}, 4);
  const auto away_from_0 = test::random_tensor<double>({3, 1}, 5, 0.5, 2);
  SECTION("sub") { test::require_gradcheck(make_graph(a - b), p, {{"a", as}, {"b", bs}}); }
  SECTION("sub, the broadcast operand first") { test::require_gradcheck(make_graph(b - a), p, {{"a", as}, {"b", bs}}); }
  SECTION("div") { test::require_gradcheck(make_graph(a / b), p, {{"a", as}, {"b", away_from_0}}); }
  SECTION("div, the broadcast operand the numerator") {
    test::require_gradcheck(make_graph(b / a), p,
                            {{"a", test::random_tensor<double>({2, 1, 4}, 6, 0.5, 2)}, {"b", bs}});
  }
  SECTION("maximum") { test::require_gradcheck(make_graph(maximum(a, b)), p, {{"a", as}, {"b", bs}}); }
  SECTION("minimum") { test::require_gradcheck(make_graph(minimum(b, a)), p, {{"a", as}, {"b", bs}}); }
  SECTION("same shapes, and one operand used twice: x − x·x, x / (x·x)") {
    auto x = input<"x", shape<fix<2>, fix<3>>>();
    const auto xs = test::random_tensor<double>({2, 3}, 7, 0.5, 2);
    test::require_gradcheck(make_graph(x - x * x), p, {{"x", xs}});
    test::require_gradcheck(make_graph(x / (x * x)), p, {{"x", xs}});
  }
}

TEST_CASE("x − x and maximum(x, x) give x the gradients 0 and 1") {
  auto x = input<"x", shape<fix<3>>>();
  param_store<double> p;
  const tensor<double> xs({3}, {1, -2, 0.5});
  auto grad_of = [&](auto g) {
    auto ex = g.template executor<double>(p, {.input_grads = true});
    ex.forward({{"x", xs}});
    ex.backward();
    return tensor<double>(ex.input_grad("x"));
  };
  const auto zero = grad_of(make_graph(sum(x - x)));
  const auto one = grad_of(make_graph(sum(maximum(x, x))));  // half through each operand
  for (std::int64_t i = 0; i < 3; ++i) {
    CHECK(zero[i] == 0);
    CHECK(one[i] == 1);
  }
}

TEST_CASE("maximum and minimum split the gradient 0.5 / 0.5 at ties, as PyTorch") {
  auto a = input<"a", shape<fix<3>>>();
  auto b = input<"b", shape<fix<3>>>();
  param_store<double> p;
  const tensor<double> as({3}, {1, 2, 3}), bs({3}, {1, 0, 5});
  auto grads = [&](auto g) {
    auto ex = g.template executor<double>(p, {.input_grads = true});
    ex.forward({{"a", as}, {"b", bs}});
    ex.backward();
    return std::pair{tensor<double>(ex.input_grad("a")), tensor<double>(ex.input_grad("b"))};
  };
  const auto [max_a, max_b] = grads(make_graph(sum(maximum(a, b))));
  const auto [min_a, min_b] = grads(make_graph(sum(minimum(a, b))));
  const std::vector<double> want_max_a{0.5, 1, 0}, want_max_b{0.5, 0, 1}, want_min_a{0.5, 0, 1}, want_min_b{0.5, 1, 0};
  for (std::int64_t i = 0; i < 3; ++i) {
    const auto k = static_cast<std::size_t>(i);
    CHECK(max_a[i] == want_max_a[k]);
    CHECK(max_b[i] == want_max_b[k]);
    CHECK(min_a[i] == want_min_a[k]);
    CHECK(min_b[i] == want_min_b[k]);
  }
}

TEST_CASE("maximum and minimum propagate NaN from either operand, as torch.maximum") {
  auto a = input<"a", shape<fix<3>>>();
  auto b = input<"b", shape<fix<3>>>();
  param_store<double> p;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const tensor<double> as({3}, {nan, 1, 2}), bs({3}, {0, nan, 1});
  for (bool use_min : {false, true}) {
    auto run = [&](auto g) {
      auto ex = g.template executor<double>(p);
      ex.forward({{"a", as}, {"b", bs}});
      return tensor<double>(ex.output());
    };
    const auto y = use_min ? run(make_graph(minimum(a, b))) : run(make_graph(maximum(a, b)));
    CHECK(std::isnan(y[0]));
    CHECK(std::isnan(y[1]));
    CHECK(y[2] == (use_min ? 1 : 2));
  }
}

TEST_CASE("div by 0 gives infinity and NaN as IEEE division does") {
  auto a = input<"a", shape<fix<3>>>();
  auto b = input<"b", shape<fix<3>>>();
  param_store<double> p;
  auto ex = make_graph(a / b).executor<double>(p);
  ex.forward({{"a", tensor<double>({3}, {1, -1, 0})}, {"b", tensor<double>({3}, {0, 0, 0})}});
  CHECK(ex.output()[0] == std::numeric_limits<double>::infinity());
  CHECK(ex.output()[1] == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(ex.output()[2]));
}

// ---------------------------------------------------------------- where

TEMPLATE_TEST_CASE("where picks a where cond holds and b elsewhere, the three broadcast", "", float, double) {
  using T = TestType;
  auto c = input<"c", shape<fix<2>, fix<1>>, bool>();
  auto a = input<"a", shape<fix<2>, fix<3>>>();
  auto b = input<"b", shape<fix<3>>>();
  static_assert(std::is_same_v<decltype(where(c, a, b))::shape, shape<fix<2>, fix<3>>>);
  static_assert(std::is_same_v<decltype(where(c, b, b))::shape, shape<fix<2>, fix<3>>>);
  param_store<T> p;
  auto ex = make_graph(where(c, a, b)).template executor<T>(p);
  ex.forward({{"c", tensor<std::uint8_t>({2, 1}, {0, 1})}, {"a", tensor<T>({2, 3}, {1, 2, 3, 4, 5, 6})},
              {"b", tensor<T>({3}, {-1, -2, -3})}});
  // row 0: cond false → b; row 1: cond true → a's row 1
  check_values<T>(ex.output(), {-1, -2, -3, 4, 5, 6});
}

TEST_CASE("where sends the gradient to a where cond holds, to b elsewhere, summed over broadcast axes") {
  auto c = input<"c", shape<fix<2>, fix<3>>, bool>();
  auto a = input<"a", shape<fix<2>, fix<1>>>();
  auto b = input<"b", shape<fix<3>>>();
  param_store<double> p;
  const tensor<std::uint8_t> cs({2, 3}, {1, 0, 1, 0, 0, 1});
  auto ex = make_graph(sum(where(c, a, b))).executor<double>(p, {.input_grads = true});
  ex.forward({{"c", cs}, {"a", tensor<double>({2, 1}, {10, 20})}, {"b", tensor<double>({3}, {1, 2, 3})}});
  CHECK(ex.output()[0] == 10 + 2 + 10 + 1 + 2 + 20);
  ex.backward();
  // a's row r: the number of true conds in row r; b's column j: the number of false ones
  check_values<double>(ex.input_grad("a"), {2, 1});
  check_values<double>(ex.input_grad("b"), {1, 2, 0});
  test::require_gradcheck(make_graph(where(c, a, b)), p,
                          {{"c", cs}, {"a", test::random_tensor<double>({2, 1}, 8)}, {"b", test::random_tensor<double>({3}, 9)}});
}

// ---------------------------------------------------------------- reductions

TEST_CASE("reductions remove their axis, or keep it as 1, negative axes counting from the end") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<4>>>();
  static_assert(std::is_same_v<decltype(reduce_sum<1>(x))::shape, shape<fix<2>, fix<4>>>);
  static_assert(std::is_same_v<decltype(reduce_sum<-2>(x))::shape, shape<fix<2>, fix<4>>>);
  static_assert(std::is_same_v<decltype(reduce_sum<0, true>(x))::shape, shape<fix<1>, dyn<"T">, fix<4>>>);
  static_assert(std::is_same_v<decltype(mean<-1, true>(x))::shape, shape<fix<2>, dyn<"T">, fix<1>>>);
  static_assert(std::is_same_v<decltype(mean<-1>(x))::shape, shape<fix<2>, dyn<"T">>>);
  static_assert(std::is_same_v<decltype(amax<2>(x))::shape, shape<fix<2>, dyn<"T">>>);
  static_assert(std::is_same_v<decltype(amax<-3, true>(x))::shape, shape<fix<1>, dyn<"T">, fix<4>>>);
  auto v = input<"v", shape<fix<5>>>();
  static_assert(std::is_same_v<decltype(reduce_sum<0>(v))::shape, shape<>>);
  SUCCEED();
}

TEMPLATE_TEST_CASE("reduce_sum, mean and amax over each axis of [2, 3] match sums worked out by hand", "", float,
                   double) {
  using T = TestType;
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  // x = [[1, 5, 3],
  //      [4, 2, 9]]
  const tensor<T> xs({2, 3}, {1, 5, 3, 4, 2, 9});
  auto check = [](const std::vector<T>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == near<T>(want[i]));
  };
  check(run_on(make_graph(reduce_sum<0>(x)), xs), {5, 7, 12});
  check(run_on(make_graph(reduce_sum<-1>(x)), xs), {9, 15});
  check(run_on(make_graph(reduce_sum<1, true>(x)), xs), {9, 15});
  check(run_on(make_graph(mean<0>(x)), xs), {2.5, 3.5, 6});
  check(run_on(make_graph(mean<1, true>(x)), xs), {3, 5});
  check(run_on(make_graph(amax<0>(x)), xs), {4, 5, 9});
  check(run_on(make_graph(amax<-1>(x)), xs), {5, 9});
}

TEST_CASE("reductions over a middle axis of [2, 3, 2] add along that axis only") {
  auto x = input<"x", shape<fix<2>, fix<3>, fix<2>>>();
  tensor<double> xs({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -12});
  // over axis 1: [1+3+5, 2+4+6], [7+9+11, 8+10−12]
  const auto s = run_on(make_graph(reduce_sum<1>(x)), xs);
  CHECK(s == std::vector<double>{9, 12, 27, 6});
  const auto m = run_on(make_graph(mean<-2, true>(x)), xs);
  CHECK(m == std::vector<double>{3, 4, 9, 2});
  const auto hi = run_on(make_graph(amax<1>(x)), xs);
  CHECK(hi == std::vector<double>{5, 6, 11, 10});
}

TEST_CASE("mean divides by the size of a named axis when the graph runs") {
  auto x = input<"x", shape<fix<2>, dyn<"T">>>();
  auto g = make_graph(mean<1>(x));
  CHECK(run_on(g, tensor<double>({2, 4}, {1, 2, 3, 6, 0, 0, 0, 8})) == std::vector<double>{3, 2});
  CHECK(run_on(g, tensor<double>({2, 1}, {7, -1})) == std::vector<double>{7, -1});
}

TEST_CASE("reductions pass gradcheck over every axis, with and without keepdim") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<3>>>();
  param_store<double> p;
  const auto xs = test::random_tensor<double>({2, 4, 3}, 10);  // no ties among 24 random values
  SECTION("reduce_sum") {
    test::require_gradcheck(make_graph(reduce_sum<0>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(reduce_sum<1, true>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(reduce_sum<-1>(x)), p, {{"x", xs}});
  }
  SECTION("mean") {
    test::require_gradcheck(make_graph(mean<0, true>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(mean<-2>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(mean<2>(x)), p, {{"x", xs}});
  }
  SECTION("amax") {
    test::require_gradcheck(make_graph(amax<0>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(amax<1, true>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(amax<-1>(x)), p, {{"x", xs}});
  }
}

TEST_CASE("amax shares the gradient evenly among tied maxima, as torch.amax") {
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  param_store<double> p;
  auto ex = make_graph(sum(amax<-1>(x))).executor<double>(p, {.input_grads = true});
  ex.forward({{"x", tensor<double>({2, 3}, {1, 3, 3, 2, 2, 2})}});
  CHECK(ex.output()[0] == 3 + 2);
  ex.backward();
  check_values<double>(ex.input_grad("x"), {0, 0.5, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3});
}

TEST_CASE("amax over an axis of size 0 is refused when binding, naming the op and the axis") {
  auto x = input<"x", shape<fix<2>, dyn<"T">>>();
  param_store<double> p;
  auto ex = make_graph(amax<1>(x)).executor<double>(p);
  const tensor<double> empty(dims_t{2, 0});
  CHECK_THROWS_AS(ex.forward({{"x", empty}}), shape_error);
  CHECK_THAT(test::message_of([&] { ex.forward({{"x", empty}}); }),
             Catch::Contains("amax") && Catch::Contains("axis 1") && Catch::Contains("[2, 0]"));
}

TEST_CASE("a sum over an axis of size 0 is 0 and a mean NaN, as PyTorch; a batch of 0 gives an empty output") {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">>>();
  param_store<double> p;
  const tensor<double> no_steps(dims_t{2, 0}), no_batch(dims_t{0, 3});
  const auto s = run_on(make_graph(reduce_sum<1>(x)), no_steps);
  CHECK(s == std::vector<double>{0, 0});
  const auto m = run_on(make_graph(mean<1>(x)), no_steps);
  REQUIRE(m.size() == 2);
  CHECK(std::isnan(m[0]));
  CHECK(run_on(make_graph(amax<1>(x)), no_batch).empty());
  // backward through a batch of 0: an empty gradient, and the loss (a sum over nothing) 0
  auto ex = make_graph(sum(mean<-1>(x) * reduce_sum<1>(x))).executor<double>(p, {.input_grads = true});
  ex.forward({{"x", no_batch}});
  CHECK(ex.output()[0] == 0);
  ex.backward();
  CHECK(ex.input_grad("x").dims == dims_t{0, 3});
}

TEST_CASE("reductions give the same bits for any number of threads") {
  // large enough that each reduction splits into many chunks: over T (tiles of D), over D
  // (rows), over B (one long row of tiles)
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, dyn<"D">>>();
  const auto xs = test::random_tensor<float>({3, 4000, 300}, 11);
  auto run = [&](auto g, int threads) {
    param_store<float> p;
    auto ex = g.template executor<float>(p, {.threads = threads, .input_grads = true});
    ex.forward({{"x", xs}});
    const tensor<float> y(ex.output());
    ex.backward();
    return std::pair{y, tensor<float>(ex.input_grad("x"))};
  };
  auto same = [&](auto g) {
    const auto one = run(g, 1), two = run(g, 2);
    CHECK(test::same_bits(one.first, two.first));
    CHECK(test::same_bits(one.second, two.second));
  };
  same(make_graph(sum(reduce_sum<1>(x))));
  same(make_graph(sum(mean<-1>(x))));
  same(make_graph(sum(amax<0>(x))));
}

// ---------------------------------------------------------------- compositions

namespace {
/// RMSNorm over the last axis (Zhang & Sennrich 2019): x / √(mean(x²) + eps) · w.
template <class X, class W, class E>
auto rms_norm(X x, W w, E eps) {
  return x * rsqrt(mean<-1, true>(x * x) + eps) * w;
}
}  // namespace

TEMPLATE_TEST_CASE("RMSNorm written as x · rsqrt(mean(x²) + eps) · w matches values worked out by hand", "", float,
                   double) {
  using T = TestType;
  auto x = input<"x", shape<dyn<"B">, fix<3>>>();
  auto eps = input<"eps", shape<fix<1>>>();
  auto w = param<"w", shape<fix<3>>>();
  auto y = rms_norm(x, w, eps);
  static_assert(std::is_same_v<decltype(y)::shape, shape<dyn<"B">, fix<3>>>);
  auto g = make_graph(y);
  param_store<T> p;
  p.set("w", tensor<T>({3}, {1, 2, -1}));
  auto ex = g.template executor<T>(p);
  // eps = 1: row [1, 2, 2]: mean x² = 9/3 = 3, √(3 + 1) = 2;  row [2, 2, 4]: 24/3 + 1 = 9, √9 = 3
  ex.forward({{"x", tensor<T>({2, 3}, {1, 2, 2, 2, 2, 4})}, {"eps", tensor<T>({1}, {1})}});
  check_values<T>(ex.output(), {0.5, 2, -1, 2.0 / 3, 4.0 / 3, -4.0 / 3});
}

TEST_CASE("RMSNorm by composition passes gradcheck in x, w and eps") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<4>>>();
  auto eps = input<"eps", shape<fix<1>>>();
  auto w = param<"w", shape<fix<4>>, init<init_kind::ones>>();
  auto g = make_graph(rms_norm(x, w, eps));
  auto p = g.make_params<double>(1);
  test::randomize(p, 2);
  test::require_gradcheck(g, p,
                          {{"x", test::random_tensor<double>({2, 3, 4}, 12)}, {"eps", tensor<double>({1}, {1e-5})}});
}

TEMPLATE_TEST_CASE("masked mean pooling, Σ_t x · mask / Σ_t mask, averages the valid steps only", "", float,
                   double) {
  using T = TestType;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<2>>>();
  auto mask = input<"mask", shape<dyn<"B">, dyn<"T">, fix<1>>>();  // 1: a valid step
  auto pooled = reduce_sum<1>(x * mask) / reduce_sum<1>(mask);
  static_assert(std::is_same_v<decltype(pooled)::shape, shape<dyn<"B">, fix<2>>>);
  param_store<T> p;
  auto ex = make_graph(pooled).template executor<T>(p);
  // sequence 0: steps 0 and 1 valid; sequence 1: all three (its padded step would be 100s)
  ex.forward({{"x", tensor<T>({2, 3, 2}, {1, 2, 3, 6, 100, 100, 2, 0, 4, 1, 9, 5})},
              {"mask", tensor<T>({2, 3, 1}, {1, 1, 0, 1, 1, 1})}});
  check_values<T>(ex.output(), {(1 + 3) / 2.0, (2 + 6) / 2.0, (2 + 4 + 9) / 3.0, (0 + 1 + 5) / 3.0});
}

TEST_CASE("masked mean pooling passes gradcheck in x and the mask") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<3>>>();
  auto mask = input<"mask", shape<fix<2>, dyn<"T">, fix<1>>>();
  param_store<double> p;
  test::require_gradcheck(make_graph(reduce_sum<1>(x * mask) / reduce_sum<1>(mask)), p,
                          {{"x", test::random_tensor<double>({2, 4, 3}, 13)},
                           {"mask", tensor<double>({2, 4, 1}, {1, 1, 0, 0, 1, 1, 1, 1})}});
}
