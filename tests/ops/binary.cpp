// The broadcast binary ops (binary.hpp): sub, div, maximum, minimum; ties, NaN and division by 0.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::closed_forms;

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
