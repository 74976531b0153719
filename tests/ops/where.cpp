// where(cond, a, b): the three broadcast; the gradient goes to a or b.
#include <catch2/catch.hpp>

#include <cstdint>
#include <type_traits>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::closed_forms;

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
