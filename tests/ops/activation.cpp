// relu and gelu (activation.hpp): values and derivatives against PyTorch, and gradcheck.
#include <catch2/catch.hpp>

#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::decimals;

TEST_CASE("relu zeroes negatives and passes the gradient only where x > 0") {
  auto x = input<"x", shape<fix<5>>>();
  auto g = make_graph(relu(x));
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  tensor<double> xs({5}, {-2, -0.5, 0, 0.5, 3});
  run.forward({{"x", xs}});
  check_values(run.output(), {0, 0, 0, 0.5, 3}, 0);
  std::vector<tensor<double>> dy{tensor<double>({5}, {1, 2, 3, 4, 5})};
  run.backward(dy);
  check_values(run.input_grad("x"), {0, 0, 0, 4, 5}, 0);  // 0 at x = 0, as PyTorch
}

TEMPLATE_TEST_CASE("gelu matches PyTorch's exact (erf) gelu in values and derivatives", "", float, double) {
  using T = TestType;
  auto x = input<"x", shape<fix<7>>>();
  auto g = make_graph(gelu(x));
  param_store<T> p;
  auto run = g.executor<T>(p, {.input_grads = true});
  tensor<T> xs({7}, {-3, -1, -0.5, 0, 0.5, 1, 2});
  run.forward({{"x", xs}});
  // PyTorch 1.13, float64: y = F.gelu(x); y.sum().backward()
  check_values(run.output(),
               {-0.0040496941, -0.1586552539, -0.1542687694, 0.0, 0.3457312306, 0.8413447461, 1.9544997361},
               tolerance<T>);
  std::vector<tensor<T>> ones{tensor<T>({7}, std::vector<T>(7, T(1)))};
  run.backward(ones);
  check_values(run.input_grad("x"),
               {-0.0119456472, -0.0833154706, 0.1325048753, 0.5, 0.8674951247, 1.0833154706, 1.0852318011},
               tolerance<T>);
}

TEST_CASE("relu and gelu pass gradcheck on batched, dynamic shapes") {
  param_store<double> p;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  // inputs at least 0.05 away from relu's kink at 0, so finite differences stay on one side
  auto xs = test::random_tensor<double>({2, 3, 4}, 7);
  for (auto& v : xs.values()) v = v < 0 ? v - 0.05 : v + 0.05;
  SECTION("relu") {
    test::require_gradcheck(make_graph(relu(x)), p, {{"x", xs}});
  }
  SECTION("gelu") {
    auto wide = test::random_tensor<double>({2, 3, 4}, 8, -4, 4);
    test::require_gradcheck(make_graph(gelu(x)), p, {{"x", wide}});
  }
}
