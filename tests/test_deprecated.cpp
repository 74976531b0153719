// The deprecated names still work until they are removed: each gives what its replacement gives.
#include <catch2/catch.hpp>

#include "loom/loom.hpp"
#include "test_support.hpp"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // the point of this file

using namespace loom;

TEST_CASE("the executor's deprecated node-index reads agree with value(node), grad(node) and the names") {
  auto x = input<"x", shape<dyn<"T">, fix<3>>>();
  auto h = scale<2.0>(x);
  auto y = named<"y">(h * x);
  auto g = make_graph(sum(y), y);
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  run.keep_at(run.index_of(desc_ptr<decltype(h)>()));  // keep(h), by index
  auto xs = test::random_tensor<double>({4, 3}, 7);
  run.forward({{"x", xs}});
  run.backward();
  const int hi = run.index_of(desc_ptr<decltype(h)>());
  CHECK(hi == run.original_index_of(desc_ptr<decltype(h)>()));  // nothing fused in this graph
  const auto by_index = run.value_at(hi), by_node = run.value(h);
  REQUIRE(by_index.dims == by_node.dims);
  for (std::int64_t i = 0; i < by_node.size(); ++i) CHECK(by_index[i] == 2.0 * xs[i]);
  const auto dx = run.grad_at(run.input_index("x"));
  const auto dx_named = run.input_grad("x");
  for (std::int64_t i = 0; i < dx_named.size(); ++i) {  // d/dx Σ 2x · x = 4x, exact in double
    CHECK(dx[i] == 4.0 * xs[i]);
    CHECK(dx[i] == dx_named[i]);
  }
  CHECK(run.value_at(run.named_index("y")).data == run.output("y").data);
  CHECK_THROWS_AS(run.input_index("nope"), missing_error);
  CHECK_THROWS_AS(run.keep_at(1000), error);
}
