// Layers written as compositions of the element-wise and reduction ops: RMSNorm as
// x · rsqrt(mean(x²) + eps) · w, masked mean pooling.
#include <catch2/catch.hpp>

#include <type_traits>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::closed_forms;

namespace {
/// RMSNorm over the last axis (Zhang & Sennrich 2019): x / √(mean(x²) + eps) · w.
template <class X, class W, class E>
auto rms_norm(X x, W w, E eps) {
  return x * rsqrt(mean<-1, true>(x * x) + eps) * w;
}
}  // namespace

TEMPLATE_TEST_CASE("RMSNorm written as x · rsqrt(mean(x²) + eps) · w matches values worked out by hand", "", float,
                   double) {
  using T = TestType;
  auto x = input<"x", shape<dyn<"B">, fix<3>>>();
  auto eps = input<"eps", shape<fix<1>>>();
  auto w = param<"w", shape<fix<3>>>();
  auto y = rms_norm(x, w, eps);
  static_assert(std::is_same_v<decltype(y)::shape, shape<dyn<"B">, fix<3>>>);
  auto g = make_graph(y);
  param_store<T> p;
  p.set("w", tensor<T>({3}, {1, 2, -1}));
  auto ex = g.template executor<T>(p);
  // eps = 1: row [1, 2, 2]: mean x² = 9/3 = 3, √(3 + 1) = 2;  row [2, 2, 4]: 24/3 + 1 = 9, √9 = 3
  ex.forward({{"x", tensor<T>({2, 3}, {1, 2, 2, 2, 2, 4})}, {"eps", tensor<T>({1}, {1})}});
  check_values<T>(ex.output(), {0.5, 2, -1, 2.0 / 3, 4.0 / 3, -4.0 / 3});
}

TEST_CASE("RMSNorm by composition passes gradcheck in x, w and eps") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<4>>>();
  auto eps = input<"eps", shape<fix<1>>>();
  auto w = param<"w", shape<fix<4>>, init<init_kind::ones>>();
  auto g = make_graph(rms_norm(x, w, eps));
  auto p = g.make_params<double>(1);
  test::randomize(p, 2);
  test::require_gradcheck(g, p,
                          {{"x", test::random_tensor<double>({2, 3, 4}, 12)}, {"eps", tensor<double>({1}, {1e-5})}});
}

TEMPLATE_TEST_CASE("masked mean pooling, Σ_t x · mask / Σ_t mask, averages the valid steps only", "", float,
                   double) {
  using T = TestType;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<2>>>();
  auto mask = input<"mask", shape<dyn<"B">, dyn<"T">, fix<1>>>();  // 1: a valid step
  auto pooled = reduce_sum<1>(x * mask) / reduce_sum<1>(mask);
  static_assert(std::is_same_v<decltype(pooled)::shape, shape<dyn<"B">, fix<2>>>);
  param_store<T> p;
  auto ex = make_graph(pooled).template executor<T>(p);
  // sequence 0: steps 0 and 1 valid; sequence 1: all three (its padded step would be 100s)
  ex.forward({{"x", tensor<T>({2, 3, 2}, {1, 2, 3, 6, 100, 100, 2, 0, 4, 1, 9, 5})},
              {"mask", tensor<T>({2, 3, 1}, {1, 1, 0, 1, 1, 1})}});
  check_values<T>(ex.output(), {(1 + 3) / 2.0, (2 + 6) / 2.0, (2 + 4 + 9) / 3.0, (0 + 1 + 5) / 3.0});
}

TEST_CASE("masked mean pooling passes gradcheck in x and the mask") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<3>>>();
  auto mask = input<"mask", shape<fix<2>, dyn<"T">, fix<1>>>();
  param_store<double> p;
  test::require_gradcheck(make_graph(reduce_sum<1>(x * mask) / reduce_sum<1>(mask)), p,
                          {{"x", test::random_tensor<double>({2, 4, 3}, 13)},
                           {"mask", tensor<double>({2, 4, 1}, {1, 1, 0, 0, 1, 1, 1, 1})}});
}
