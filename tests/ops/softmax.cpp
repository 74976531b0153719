// softmax over the last axis: values, gradcheck, scores at ±1e4 and a row that is all −∞.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

TEST_CASE("softmax of scores at ±1e4 does not overflow") {
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  auto g = make_graph(softmax(x));
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> xs({2, 3}, {1e4f, 0, -1e4f, 1e4f, 1e4f, -1e4f});
  run.forward({{"x", xs}});
  auto y = run.output();
  CHECK(y[0] == 1.0f);
  CHECK(y[1] == 0.0f);
  CHECK(y[2] == 0.0f);
  CHECK(y[3] == 0.5f);
  CHECK(y[4] == 0.5f);
  CHECK(y[5] == 0.0f);
}

TEST_CASE("softmax matches exp(x) / sum exp(x) and passes gradcheck") {
  auto x = input<"x", shape<dyn<"R">, fix<3>>>();
  auto g = make_graph(softmax(x));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({1, 3}, {1, 2, 3});
  run.forward({{"x", xs}});
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  for (int j = 0; j < 3; ++j) CHECK(run.output()[j] == Approx(std::exp(j + 1.0) / z).epsilon(1e-14));
  test::require_gradcheck(g, p, {{"x", test::random_tensor<double>({4, 3}, 9, -3, 3)}});
}

TEST_CASE("softmax of a fully masked row is zero, not NaN") {
  // causal with S < T: query 0 sees keys j <= 0 + (S - T) = -1, i.e. none
  auto x = input<"x", shape<fix<3>, fix<2>>>();
  auto g = make_graph(softmax(mask_causal(x)));
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  auto xs = test::random_tensor<double>({3, 2}, 4);
  run.forward({{"x", xs}});
  CHECK(run.output()[0] == 0.0);
  CHECK(run.output()[1] == 0.0);
  CHECK(run.output()[2] == 1.0);  // query 1 sees key 0 only
  CHECK(run.output()[3] == 0.0);
  run.backward(std::vector<tensor<double>>{test::random_tensor<double>({3, 2}, 5)});
  for (std::int64_t i = 0; i < 6; ++i) CHECK(std::isfinite(run.input_grad("x")[i]));
  test::require_gradcheck(g, p, {{"x", xs}});
}
