// silu: values and derivatives against PyTorch's F.silu.
#include <catch2/catch.hpp>

#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::decimals;

TEMPLATE_TEST_CASE("silu matches PyTorch's F.silu in values and derivatives", "", float, double) {
  using T = TestType;
  auto x = input<"x", shape<fix<5>>>();
  auto g = make_graph(silu(x));
  param_store<T> p;
  auto run = g.executor<T>(p, {.input_grads = true});
  tensor<T> xs({5}, {-3, -0.5, 0, 0.7, 2.5});
  run.forward({{"x", xs}});
  // PyTorch 1.13, float64: y = F.silu(x); y.sum().backward()
  check_values(run.output(), {-0.1422776195, -0.1887703344, 0.0, 0.4677314405, 2.3103545499}, tolerance<T>);
  std::vector<tensor<T>> ones{tensor<T>({5}, std::vector<T>(5, T(1)))};
  run.backward(ones);
  check_values(run.input_grad("x"), {-0.0881041060, 0.2600388127, 0.5, 0.8233867835, 1.0994011113}, tolerance<T>);
}
