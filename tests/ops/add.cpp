// add: broadcast addition.
#include <catch2/catch.hpp>

#include <vector>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

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
