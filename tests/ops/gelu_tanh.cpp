// gelu_tanh: values and slope against the formula (gelu_tanh.hpp), a huge |x|, and gradcheck.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::double_reference;

namespace {

/// GELU's tanh form and its derivative, from the formula.
double gelu_tanh_naive(double x) {
  const double k = std::sqrt(2 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double gelu_tanh_slope_naive(double x) {
  const double k = std::sqrt(2 / std::numbers::pi), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

}  // namespace

TEMPLATE_TEST_CASE("gelu_tanh is x/2 · (1 + tanh(√(2/π) (x + 0.044715 x³))) with its exact slope", "", float, double) {
  using T = TestType;
  auto x = input<"x", shape<dyn<"N">>>();
  param_store<T> p;
  auto run = make_graph(gelu_tanh(x)).template executor<T>(p, {.input_grads = true});
  const tensor<T> xs({8}, {-3, -1, -0.5, 0, 0.5, 1, 2, 3});
  run.forward({{"x", xs}});
  // Python: 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
  check_near(doubles(run.output()),
             {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0, 0.34571400982514394,
              0.8411919906082768, 1.954597694087775, 2.996362607918227},
             tolerance<T>);
  const auto many = test::random_tensor<T>({64}, 16, -6, 6), dy = test::random_tensor<T>({64}, 17);
  run.forward({{"x", many}});
  run.backward(std::vector<tensor<T>>{dy});
  std::vector<double> y, dx;
  for (std::int64_t i = 0; i < 64; ++i) {
    y.push_back(gelu_tanh_naive(many[i]));
    dx.push_back(dy[i] * gelu_tanh_slope_naive(many[i]));
  }
  check_near(doubles(run.output()), y, 2 * tolerance<T>);
  check_near(doubles(run.input_grad("x")), dx, 4 * tolerance<T>);
}

TEST_CASE("gelu_tanh of a huge |x| has the slope 0 or 1, not NaN") {
  auto x = input<"x", shape<fix<4>>>();
  param_store<float> p;
  auto run = make_graph(gelu_tanh(x)).executor<float>(p, {.input_grads = true});
  const float huge = 1e30f;  // x³ and x² overflow to ∞
  run.forward({{"x", tensor<float>({4}, {huge, -huge, 50, -50})}});
  run.backward(std::vector<tensor<float>>{tensor<float>({4}, {1, 1, 1, 1})});
  CHECK(doubles(run.output()) == std::vector<double>{huge, 0, 50, 0});
  CHECK(doubles(run.input_grad("x")) == std::vector<double>{1, 0, 1, 0});
}

TEST_CASE("gelu_tanh passes gradcheck") {
  auto x = input<"x", shape<fix<3>, fix<5>>>();
  param_store<double> p;
  test::require_gradcheck(make_graph(gelu_tanh(x)), p, {{"x", test::random_tensor<double>({3, 5}, 18, -4, 4)}});
}
