// sum: the sum of every element, a scalar.
#include <catch2/catch.hpp>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

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
