// layer_norm: values and gradients against PyTorch's F.layer_norm, and gradcheck.
#include <catch2/catch.hpp>

#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::decimals;

TEMPLATE_TEST_CASE("layer_norm matches PyTorch's F.layer_norm in values and gradients", "", float, double) {
  using T = TestType;
  auto x = input<"x", shape<dyn<"R">, fix<4>>>();
  auto gamma = param<"ln.weight", shape<fix<4>>>();
  auto beta = param<"ln.bias", shape<fix<4>>>();
  auto g = make_graph(layer_norm<1e-5>(x, gamma, beta));
  param_store<T> p;
  p.set("ln.weight", tensor<T>({4}, {0.5, 1.0, -1.5, 2.0}));
  p.set("ln.bias", tensor<T>({4}, {0.1, -0.2, 0.3, 0.0}));
  auto run = g.executor<T>(p, {.input_grads = true});
  tensor<T> xs({2, 4}, {1, 2, 3, 4, -0.5, 0.0, 2.5, 1.0});
  run.forward({{"x", xs}});
  // PyTorch 1.13, float64: y = F.layer_norm(x, (4,), gamma, beta, eps=1e-5); y.backward(dy)
  check_values(run.output(),
               {-0.57081771, -0.6472118067, -0.37081771, 2.6832708399,  //
                -0.4455426473, -0.8546511768, -1.9912791188, 0.4364341179},
               tolerance<T>);
  std::vector<tensor<T>> dy{tensor<T>({2, 4}, {0.3, -0.1, 0.2, 0.5, 1, 0, -1, 0.5})};
  run.backward(dy);
  check_values(run.input_grad("x"),
               {0.2817409159, -0.152052855, -0.5411254453, 0.4114373844,  //
                0.2493873618, -0.3740885244, 4.9878e-06, 0.1246961748},
               tolerance<T>);
  check_values(p.grad("ln.weight"), {-1.4935759207, 0.0447211807, -1.4380770512, 0.7799262395}, tolerance<T>);
  check_values(p.grad("ln.bias"), {1.3, -0.1, -0.8, 1.0}, tolerance<T>);
}

TEST_CASE("layer_norm passes gradcheck for x, gamma and beta") {
  param_store<double> p;
  p.set("ln.weight", test::random_tensor<double>({5}, 3));
  p.set("ln.bias", test::random_tensor<double>({5}, 4));
  auto gamma = param<"ln.weight", shape<fix<5>>>();
  auto beta = param<"ln.bias", shape<fix<5>>>();
  SECTION("[B, T, D], B = 2, dynamic B and T") {
    auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<5>>>();
    test::require_gradcheck(make_graph(layer_norm<1e-5>(x, gamma, beta)), p,
                            {{"x", test::random_tensor<double>({2, 3, 5}, 5)}});
  }
  SECTION("21 rows: a whole block of 16 rows, whose statistics are computed together, and a ragged one") {
    auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<5>>>();
    test::require_gradcheck(make_graph(layer_norm<1e-5>(x, gamma, beta)), p,
                            {{"x", test::random_tensor<double>({3, 7, 5}, 8)}});
  }
  SECTION("one row, eps 1e-6") {
    auto x = input<"x", shape<fix<1>, fix<5>>>();
    test::require_gradcheck(make_graph(layer_norm<1e-6>(x, gamma, beta)), p,
                            {{"x", test::random_tensor<double>({1, 5}, 6)}});
  }
  SECTION("a row of nearly equal values (variance near eps)") {
    auto x = input<"x", shape<fix<2>, fix<5>>>();
    tensor<double> xs({2, 5}, {0.3, 0.3001, 0.2999, 0.3, 0.30005, -1, 2, 0.5, 0.25, 1});
    test::require_gradcheck(make_graph(layer_norm<1e-5>(x, gamma, beta)), p, {{"x", xs}});
  }
}
