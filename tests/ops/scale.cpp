// scale: multiplication by a compile-time constant.
#include <catch2/catch.hpp>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

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
