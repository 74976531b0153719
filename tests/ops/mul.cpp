// mul: broadcast elementwise product.
#include <catch2/catch.hpp>

#include <type_traits>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::decimals;

TEST_CASE("mul multiplies elementwise, broadcasting a suffix-shaped operand") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<3>>>();
  auto s = input<"s", shape<fix<3>>>();
  static_assert(std::is_same_v<decltype(s * x), decltype(mul(x, s))>, "operator* broadcasts the smaller operand");
  auto g = make_graph(mul(x, s));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({2, 1, 3}, {1, 2, 3, 4, 5, 6}), ss({3}, {10, -1, 0.5});
  run.forward({{"x", xs}, {"s", ss}});
  check_values(run.output(), {10, -2, 1.5, 40, -5, 3}, 0);
}

TEST_CASE("mul passes gradcheck: same shapes, broadcast, and a node times itself") {
  param_store<double> p;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<3>>>();
  auto xs = test::random_tensor<double>({2, 3, 3}, 12);
  SECTION("same shapes") {
    auto y = input<"y", shape<dyn<"B">, dyn<"T">, fix<3>>>();
    test::require_gradcheck(make_graph(mul(x, y)), p, {{"x", xs}, {"y", test::random_tensor<double>({2, 3, 3}, 13)}});
  }
  SECTION("broadcast [T, 3] and [3]") {
    auto e = input<"e", shape<dyn<"T">, fix<3>>>();
    auto s = input<"s", shape<fix<3>>>();
    test::require_gradcheck(
        make_graph(mul(mul(x, e), s)), p,
        {{"x", xs}, {"e", test::random_tensor<double>({3, 3}, 14)}, {"s", test::random_tensor<double>({3}, 15)}});
  }
  SECTION("x * x") {
    test::require_gradcheck(make_graph(x * x), p, {{"x", xs}});
  }
}
