// rms_norm: forward and backward against a naive double RMSNorm written from the formula
// (norm.hpp), rows of zeros, many chunks of rows, an empty batch, and gradcheck.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::double_reference;

namespace {

/// RMSNorm by its definition, rows of d: r = 1/√(mean(x²) + eps), y = x r w; and, for a
/// cotangent dy, dw = Σ_rows dy x r and dx = r w dy − x r³ mean(x w dy).
struct rms_norm_reference {
  std::vector<double> y, dx, dw;
};
rms_norm_reference rms_norm_naive(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& dy, double eps) {
  const std::size_t d = w.size(), rows = x.size() / d;
  rms_norm_reference ref{std::vector<double>(x.size()), std::vector<double>(x.size()), std::vector<double>(d)};
  for (std::size_t r = 0; r < rows; ++r) {
    double squares = 0, xwdy = 0;
    for (std::size_t j = 0; j < d; ++j) {
      squares += x[r * d + j] * x[r * d + j];
      xwdy += x[r * d + j] * w[j] * dy[r * d + j];
    }
    const double inv = 1 / std::sqrt(squares / static_cast<double>(d) + eps);
    for (std::size_t j = 0; j < d; ++j) {
      ref.y[r * d + j] = x[r * d + j] * inv * w[j];
      ref.dw[j] += dy[r * d + j] * x[r * d + j] * inv;
      ref.dx[r * d + j] = inv * w[j] * dy[r * d + j] - x[r * d + j] * inv * inv * inv * xwdy / static_cast<double>(d);
    }
  }
  return ref;
}

}  // namespace

TEMPLATE_TEST_CASE("rms_norm scales each row by 1/√(mean(x²) + eps) and by w, and its gradients are the closed forms",
                   "", float, double) {
  using T = TestType;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<6>>>();
  auto w = param<"norm.weight", shape<fix<6>>>();
  auto g = make_graph(rms_norm<1e-5>(x, w));
  param_store<T> p;
  const auto ws = test::random_tensor<T>({6}, 1, -2, 2);
  p.set("norm.weight", ws);
  auto run = g.template executor<T>(p, {.input_grads = true});
  const auto xs = test::random_tensor<T>({2, 3, 6}, 2, -3, 3);
  const auto dy = test::random_tensor<T>({2, 3, 6}, 3);
  run.forward({{"x", xs}});
  run.backward(std::vector<tensor<T>>{dy});
  const auto ref = rms_norm_naive(doubles(xs), doubles(ws), doubles(dy), 1e-5);
  check_near(doubles(run.output()), ref.y, tolerance<T>);
  check_near(doubles(run.input_grad("x")), ref.dx, 4 * tolerance<T>);
  check_near(doubles(p.grad("norm.weight")), ref.dw, 4 * tolerance<T>);
}

TEST_CASE("rms_norm of a row of zeros is zero, and its eps keeps the gradient finite") {
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  auto w = param<"w", shape<fix<3>>>();
  param_store<double> p;
  p.set("w", tensor<double>({3}, {1, 2, -1}));
  auto run = make_graph(rms_norm<1e-6>(x, w)).executor<double>(p, {.input_grads = true});
  // row [1, 2, 2]: mean x² = 3, r = 1/√(3 + 1e-6)
  run.forward({{"x", tensor<double>({2, 3}, {0, 0, 0, 1, 2, 2})}});
  const double r = 1 / std::sqrt(3 + 1e-6);
  check_near(doubles(run.output()), {0, 0, 0, r, 4 * r, -2 * r}, 1e-15);
  run.backward(std::vector<tensor<double>>{tensor<double>({2, 3}, {1, 1, 1, 0, 0, 0})});
  // at x = 0: dx = r w dy with r = 1/√eps
  check_near(doubles(run.input_grad("x")), {1e3, 2e3, -1e3, 0, 0, 0}, 1e-12);
}

TEST_CASE("rms_norm passes gradcheck in x and w") {
  param_store<double> p;
  p.set("w", test::random_tensor<double>({5}, 4, -2, 2));
  auto w = param<"w", shape<fix<5>>>();
  SECTION("[B, T, D], dynamic B and T, eps 1e-5") {
    auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<5>>>();
    test::require_gradcheck(make_graph(rms_norm<1e-5>(x, w)), p, {{"x", test::random_tensor<double>({2, 3, 5}, 5)}});
  }
  SECTION("one row, eps 1e-6") {
    auto x = input<"x", shape<fix<5>>>();
    test::require_gradcheck(make_graph(rms_norm<1e-6>(x, w)), p, {{"x", test::random_tensor<double>({5}, 6)}});
  }
  SECTION("x and w one node: w's gradient gets both contributions") {
    test::require_gradcheck(make_graph(rms_norm<1e-6>(w, w)), p, {});
  }
}

TEST_CASE("rms_norm's w gradient over many chunks of rows equals the sum over every row") {
  // 3000 rows of 8: the backward sums dw in chunks of rows, added in order
  auto x = input<"x", shape<dyn<"N">, fix<8>>>();
  auto w = param<"w", shape<fix<8>>>();
  param_store<double> p;
  const auto ws = test::random_tensor<double>({8}, 7, -2, 2);
  p.set("w", ws);
  auto run = make_graph(rms_norm<1e-6>(x, w)).executor<double>(p, {.input_grads = true});
  const auto xs = test::random_tensor<double>({3000, 8}, 8), dy = test::random_tensor<double>({3000, 8}, 9);
  run.forward({{"x", xs}});
  run.backward(std::vector<tensor<double>>{dy});
  const auto ref = rms_norm_naive(doubles(xs), doubles(ws), doubles(dy), 1e-6);
  check_near(doubles(p.grad("w")), ref.dw, 1e-12);
  check_near(doubles(run.input_grad("x")), ref.dx, 1e-12);
}

TEST_CASE("rms_norm of a batch of 0 rows is empty and gives w a zero gradient") {
  auto x = input<"x", shape<dyn<"B">, fix<4>>>();
  auto w = param<"w", shape<fix<4>>, init<init_kind::ones>>();
  auto g = make_graph(sum(rms_norm<1e-6>(x, w)));
  auto p = g.make_params<double>(1);
  auto run = g.executor<double>(p, {.input_grads = true});
  run.forward({{"x", tensor<double>(dims_t{0, 4})}});
  CHECK(run.output()[0] == 0);
  run.backward();
  CHECK(run.input_grad("x").dims == dims_t{0, 4});
  CHECK(doubles(p.grad("w")) == std::vector<double>{0, 0, 0, 0});
}
