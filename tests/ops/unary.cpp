// The unary element-wise ops (unary.hpp): neg, exp, log, sqrt, rsqrt, tanh, sigmoid, abs, square.
#include <catch2/catch.hpp>

#include <type_traits>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::closed_forms;

namespace {

// ln 2, ln 3, e: the inputs whose images are round numbers
constexpr double ln2 = 0.69314718055994530942, ln3 = 1.09861228866810969140, e = 2.71828182845904523536;

}  // namespace

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
