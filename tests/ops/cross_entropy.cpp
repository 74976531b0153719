// cross_entropy: values and gradients against PyTorch's F.cross_entropy (ignore index, label
// smoothing), bad targets, and gradcheck.
#include <catch2/catch.hpp>

#include <cmath>
#include <type_traits>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using Catch::Matchers::Contains;
using namespace op_test;
using namespace op_test::decimals;

namespace {
// logits [2, 3, 4] and targets [2, 3] shared by the PyTorch comparisons below
tensor<double> ce_logits() {
  return tensor<double>({2, 3, 4}, {1.0,  2.0, 0.5, -1.0, 0.0, 0.3,  -0.2, 1.5, 2.0, 2.0, 2.0,  2.0,  //
                                    -1.0, 0.0, 1.0, 3.0,  0.7, -0.7, 0.1,  0.2, 1.2, 0.4, -2.0, 0.0});
}
}  // namespace

TEST_CASE("cross_entropy of equal logits is log V whatever the target or smoothing") {
  auto logits = input<"logits", shape<fix<2>, fix<4>>>();
  auto target = input<"target", shape<fix<2>>, int>();
  param_store<double> p;
  tensor<double> ls({2, 4});
  ls.fill(0.5);
  tokens_t ts({2}, {0, 3});
  auto plain = make_graph(cross_entropy(logits, target)).executor<double>(p);
  plain.forward({{"logits", ls}, {"target", ts}});
  CHECK(plain.output()[0] == Approx(std::log(4.0)).epsilon(1e-14));
  auto smooth = make_graph(cross_entropy<-100, 0.3>(logits, target)).executor<double>(p);
  smooth.forward({{"logits", ls}, {"target", ts}});
  CHECK(smooth.output()[0] == Approx(std::log(4.0)).epsilon(1e-14));
}

TEST_CASE("cross_entropy is the mean over targets that are not the ignore index, as PyTorch") {
  auto logits = input<"logits", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto target = input<"target", shape<dyn<"B">, dyn<"T">>, int>();
  auto g = make_graph(cross_entropy(logits, target));
  static_assert(std::is_same_v<decltype(cross_entropy(logits, target))::shape, shape<>>);
  param_store<double> p;
  auto run = g.executor<double>(p);
  tokens_t ts({2, 3}, {0, 3, -100, 2, 1, 1});
  run.forward({{"logits", ce_logits()}, {"target", ts}});
  // PyTorch 1.13: F.cross_entropy(logits.reshape(-1, 4), t.reshape(-1))
  CHECK(run.output()[0] == Approx(1.5748632615458091).epsilon(1e-13));
}

TEMPLATE_TEST_CASE("cross_entropy with label smoothing 0.1 matches PyTorch in value and gradient", "", float, double) {
  using T = TestType;
  auto logits = input<"logits", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto target = input<"target", shape<dyn<"B">, dyn<"T">>, int>();
  auto g = make_graph(cross_entropy<-100, 0.1>(logits, target));
  param_store<T> p;
  auto run = g.executor<T>(p, {.input_grads = true});
  tokens_t ts({2, 3}, {0, 3, -100, 2, 1, 1});
  auto ls = tensor_cast<T>(ce_logits());
  run.forward({{"logits", ls}, {"target", ts}});
  // PyTorch 1.13: l = F.cross_entropy(logits.reshape(-1, 4), t.reshape(-1), label_smoothing=0.1);
  // l.backward()
  CHECK(run.output()[0] == Approx(1.603863261545809).epsilon(std::is_same_v<T, float> ? 1e-6 : 1e-13));
  run.backward();
  check_values(run.input_grad("logits"),
               {-0.1401584364, 0.1168920075,  0.0221977832,  0.0010686457,  0.0211428387,  0.030289141,
                0.016403946,   -0.0678359257, 0.0,           0.0,           0.0,           0.0,
                -0.0019561142, 0.0032741394,  -0.1625085573, 0.1611905321,  0.0782660523,  -0.1644668443,
                0.0406973784,  0.0455034136,  0.1066516677,  -0.1348316718, -0.0004488319, 0.0286288361},
               tolerance<T>);
}

TEST_CASE("cross_entropy with ignore index 1 and label smoothing 0.1 matches PyTorch") {
  auto logits = input<"logits", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto target = input<"target", shape<dyn<"B">, dyn<"T">>, int>();
  auto g = make_graph(cross_entropy<1, 0.1>(logits, target));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tokens_t ts({2, 3}, {0, 3, 1, 2, 1, 1});
  run.forward({{"logits", ce_logits()}, {"target", ts}});
  // PyTorch 1.13: F.cross_entropy(logits.reshape(-1, 4), t.reshape(-1), ignore_index=1,
  // label_smoothing=0.1)
  CHECK(run.output()[0] == Approx(1.4625354734055789).epsilon(1e-13));
}

TEST_CASE("cross_entropy over targets that are all ignored is 0 with a zero gradient (PyTorch: NaN)") {
  auto logits = input<"logits", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto target = input<"target", shape<dyn<"B">, dyn<"T">>, int>();
  auto g = make_graph(cross_entropy<-100, 0.1>(logits, target));
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  tokens_t ts({2, 3}, {-100, -100, -100, -100, -100, -100});
  run.forward({{"logits", ce_logits()}, {"target", ts}});
  CHECK(run.output()[0] == 0.0);
  run.backward();
  for (double v : run.input_grad("logits").values()) CHECK(v == 0.0);
}

TEST_CASE("a target below 0 or at least V that is not the ignore index throws value_error") {
  auto logits = input<"logits", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto target = input<"target", shape<dyn<"B">, dyn<"T">>, int>();
  auto g = make_graph(cross_entropy<0>(logits, target));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tokens_t ignored_default({2, 3}, {0, 3, -100, 2, 1, 1});  // -100 is not the ignore index here
  CHECK_THROWS_AS(run.forward({{"logits", ce_logits()}, {"target", ignored_default}}), value_error);
  CHECK_THROWS_WITH(run.forward({{"logits", ce_logits()}, {"target", ignored_default}}),
                    Contains("target -100 at position [0, 2]") && Contains("[0, 4)"));
  tokens_t too_big({2, 3}, {0, 3, 0, 2, 4, 1});
  CHECK_THROWS_WITH(run.forward({{"logits", ce_logits()}, {"target", too_big}}),
                    Contains("target 4 at position [1, 1]"));
}

TEST_CASE("cross_entropy passes gradcheck: batch, dynamic dims, ignore index, label smoothing") {
  param_store<double> p;
  auto logits = input<"logits", shape<dyn<"B">, dyn<"T">, fix<5>>>();
  auto target = input<"target", shape<dyn<"B">, dyn<"T">>, int>();
  auto ls = test::random_tensor<double>({2, 3, 5}, 16, -2, 2);
  tokens_t ts({2, 3}, {4, -100, 0, 2, 2, -100});
  SECTION("plain") {
    test::require_gradcheck(make_graph(cross_entropy(logits, target)), p, {{"logits", ls}, {"target", ts}});
  }
  SECTION("label smoothing 0.1") {
    test::require_gradcheck(make_graph(cross_entropy<-100, 0.1>(logits, target)), p, {{"logits", ls}, {"target", ts}});
  }
  SECTION("ignore index 2, label smoothing 0.2") {
    tokens_t ts2({2, 3}, {4, 1, 0, 2, 2, 3});
    test::require_gradcheck(make_graph(cross_entropy<2, 0.2>(logits, target)), p, {{"logits", ls}, {"target", ts2}});
  }
  SECTION("logits [V] and a single target") {
    auto v = input<"v", shape<fix<5>>>();
    auto t = input<"t", shape<>, int>();
    test::require_gradcheck(make_graph(cross_entropy(v, t)), p,
                            {{"v", test::random_tensor<double>({5}, 17)}, {"t", tokens_t(dims_t{}, {3})}});
  }
}
