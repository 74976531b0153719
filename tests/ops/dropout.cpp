// dropout: the kept fraction and scale, masks drawn from the seed, the identity when not
// training, the backward's recomputed mask, and gradcheck.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;

TEST_CASE("dropout keeps about 1 - P of a large tensor and scales what it keeps by 1/(1 - P)") {
  auto x = input<"x", shape<dyn<"N">, fix<1000>>>();
  auto seed = input<"seed", shape<fix<2>>, int>();
  auto g = make_graph(dropout<0.25>(x, seed));
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> xs({1000, 1000});
  xs.fill(1.0f);
  run.forward({{"x", xs}, {"seed", seed_of(42, 0)}});
  std::int64_t kept = 0, other = 0;
  for (float v : run.output().values()) {
    if (v == 1.0f / 0.75f)
      ++kept;
    else if (v != 0.0f)
      ++other;
  }
  CHECK(other == 0);
  // 10⁶ Bernoulli(0.75) draws: standard deviation of the fraction ≈ 4.3e-4; allow 7 of them
  CHECK(static_cast<double>(kept) / 1e6 == Approx(0.75).margin(0.003));
}

TEST_CASE("dropout draws the same mask for the same seed and a different one otherwise") {
  auto x = input<"x", shape<fix<64>, fix<64>>>();
  auto seed = input<"seed", shape<fix<2>>, int>();
  auto g = make_graph(dropout<0.5>(x, seed));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({64, 64});
  xs.fill(1.0);
  auto mask = [&](std::int32_t s, std::int32_t step) {
    run.forward({{"x", xs}, {"seed", seed_of(s, step)}});
    return copy_of(run.output());
  };
  const auto first = mask(7, 0);
  CHECK(mask(7, 0) == first);
  CHECK(mask(8, 0) != first);
  CHECK(mask(7, 1) != first);
  // a different mask, not just a shifted one: about half the elements differ
  const auto other = mask(7, 1);
  int differ = 0;
  for (std::size_t i = 0; i < first.size(); ++i) differ += first[i] != other[i];
  CHECK(differ > 1700);
  CHECK(differ < 2400);
}

TEST_CASE("two dropout nodes fed the same seed draw different masks") {
  auto x = input<"x", shape<fix<32>, fix<32>>>();
  auto seed = input<"seed", shape<fix<2>>, int>();
  auto a = dropout<0.5>(x, seed);
  auto b = dropout<0.5>(scale<1.0>(x), seed);
  auto g = make_graph(a, b);
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({32, 32});
  xs.fill(1.0);
  run.forward({{"x", xs}, {"seed", seed_of(3, 0)}});
  CHECK(copy_of(run.output(0)) != copy_of(run.output(1)));
}

TEST_CASE("dropout is the identity when not training") {
  auto x = input<"x", shape<dyn<"B">, fix<8>>>();
  auto seed = input<"seed", shape<fix<2>>, int>();
  auto g = make_graph(dropout<0.5>(x, seed));
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true, .training = false});
  auto xs = test::random_tensor<double>({3, 8}, 9);
  run.forward({{"x", xs}, {"seed", seed_of(1, 2)}});
  CHECK(copy_of(run.output()) == copy_of(xs));
  std::vector<tensor<double>> dy{test::random_tensor<double>({3, 8}, 10)};
  run.backward(dy);
  CHECK(copy_of(run.input_grad("x")) == copy_of(dy[0]));
}

TEST_CASE("dropout's backward recomputes the forward's mask") {
  // with x = 1 everywhere, y = mask / (1 − P), and d Σy / dx = mask / (1 − P) = y
  auto x = input<"x", shape<fix<40>, fix<50>>>();
  auto seed = input<"seed", shape<fix<2>>, int>();
  auto g = make_graph(sum(dropout<0.3>(x, seed)));
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  run.keep(dropout<0.3>(x, seed));
  tensor<double> xs({40, 50});
  xs.fill(1.0);
  run.forward({{"x", xs}, {"seed", seed_of(11, 5)}});
  auto y = copy_of(run.value(dropout<0.3>(x, seed)));
  run.backward();
  CHECK(copy_of(run.input_grad("x")) == y);
  int kept = 0;
  for (double v : y) kept += v != 0;
  CHECK(kept > 0);
  CHECK(kept < 2000);
}

TEST_CASE("dropout passes gradcheck in training mode, batched and dynamic") {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<6>>>();
  auto seed = input<"seed", shape<fix<2>>, int>();
  param_store<double> p;
  test::require_gradcheck(make_graph(dropout<0.4>(x, seed)), p,
                          {{"x", test::random_tensor<double>({2, 5, 6}, 11)}, {"seed", seed_of(5, 1)}});
}
