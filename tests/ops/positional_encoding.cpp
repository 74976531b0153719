// add_positional_encoding: sin/cos of pos / 10000^(2i/D), at given positions or at 0..T−1.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using Catch::Matchers::Contains;
using namespace op_test;
using namespace op_test::decimals;

TEMPLATE_TEST_CASE("positional encoding adds sin/cos of pos / 10000^(2i/D) at the given positions", "", float, double) {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
  auto g = make_graph(add_positional_encoding(x, pos));
  param_store<TestType> p;
  auto run = g.executor<TestType>(p);
  tensor<TestType> xs({2, 2, 4}, {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, -1, -1, -1, -1});
  tokens_t ps({2, 2}, {1, 7, 100, 0});
  run.forward({{"x", xs}, {"pos", ps}});
  // Python: [sin(p / 10000**(j/4)) if j % 2 == 0 else cos(p / 10000**((j-1)/4)) for j in range(4)]
  check_values(run.output(),
               {0.8414709848, 0.5403023059, 0.0099998333, 0.9999500004,                  // pos 1
                1 + 0.6569865987, 1 + 0.7539022543, 1 + 0.0699428473, 1 + 0.9975510003,  // pos 7
                -0.5063656411, 0.8623188723, 0.8414709848, 0.5403023059,                 // pos 100
                -1 + 0.0, -1 + 1.0, -1 + 0.0, -1 + 1.0},                                 // pos 0
               tolerance<TestType>);
}

// Given positions below 4096 read a per-thread table made in blocks of 64 rows
// (ops/positional_encoding.cpp); above it, the values are computed directly. Both must equal the
// formula: positions at block edges, a repeat (read back from the table), and beyond the table.
TEMPLATE_TEST_CASE("positional encoding at given positions equals the formula at block edges and beyond the table", "",
                   float, double) {
  using T = TestType;
  constexpr long D = 6;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>();
  auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
  auto g = make_graph(add_positional_encoding(x, pos));
  param_store<T> p;
  auto run = g.executor<T>(p);
  const std::vector<std::int32_t> at{0, 63, 64, 65, 127, 128, 4095, 4096, 5000, 63, 2000000000};
  const auto n = static_cast<std::int64_t>(at.size());
  tensor<T> xs(dims_t{1, n, D});
  for (std::int64_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<T>(i % 7) - 3;
  for (int round = 0; round < 2; ++round) {  // the second forward reads every cached row back
    run.forward({{"x", xs}, {"pos", tokens_t({1, n}, at)}});
    auto y = run.output();
    for (std::int64_t t = 0; t < n; ++t)
      for (long j = 0; j < D; ++j) {
        const double angle = at[static_cast<std::size_t>(t)] / std::pow(10000.0, static_cast<double>(j - j % 2) / D);
        const double pe = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
        const T expect = xs[t * D + j] + static_cast<T>(pe);
        INFO("position " << at[static_cast<std::size_t>(t)] << ", column " << j << ", round " << round);
        CHECK(std::abs(y.data[t * D + j] - expect) <= tolerance<T>);
      }
  }
}

// Without positions, steps 0..T−1 read the same per-thread table (and past 4096 are computed).
TEST_CASE("positional encoding without positions equals the formula at block edges and beyond the table") {
  constexpr long D = 2;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>();
  auto g = make_graph(add_positional_encoding(x));
  param_store<float> p;
  auto run = g.executor<float>(p);
  constexpr std::int64_t T = 4100;
  for (int round = 0; round < 2; ++round) {
    run.forward({{"x", tensor<float>(dims_t{2, T, D})}});  // zeros: the output is PE
    auto y = run.output();
    for (std::int64_t b : {0, 1})
      for (std::int64_t t : {0, 1, 63, 64, 65, 4095, 4096, 4099}) {
        INFO("sequence " << b << ", step " << t << ", round " << round);
        CHECK(std::abs(y.data[(b * T + t) * D] - static_cast<float>(std::sin(static_cast<double>(t)))) <= tolerance<float>);
        CHECK(std::abs(y.data[(b * T + t) * D + 1] - static_cast<float>(std::cos(static_cast<double>(t)))) <= tolerance<float>);
      }
  }
}

TEST_CASE("without positions, step t of every sequence gets the encoding of position t, also for an odd D") {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<5>>>();
  auto g = make_graph(add_positional_encoding(x));
  param_store<double> p;
  auto run = g.executor<double>(p);
  run.forward({{"x", tensor<double>({2, 4, 5})}});
  // Python, D = 5: the same formula; column 4 is sin(p / 10000**(4/5))
  const std::vector<double> pe{0.0,          1.0,           0.0,          1.0,          0.0,            // t = 0
                               0.8414709848, 0.5403023059,  0.0251162229, 0.9996845379, 0.0006309573,   // t = 1
                               0.9092974268, -0.4161468365, 0.0502165994, 0.9987383507, 0.0012619144,   // t = 2
                               0.1411200081, -0.9899924966, 0.075285293,  0.9971620353, 0.0018928709};  // t = 3
  std::vector<double> both(pe);
  both.insert(both.end(), pe.begin(), pe.end());
  check_values(run.output(), both, 1e-10);
}

TEST_CASE("a negative position throws value_error") {
  auto x = input<"x", shape<fix<1>, dyn<"T">, fix<2>>>();
  auto pos = input<"pos", shape<fix<1>, dyn<"T">>, int>();
  auto g = make_graph(add_positional_encoding(x, pos));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tokens_t ps({1, 3}, {0, 1, -2});
  CHECK_THROWS_AS(run.forward({{"x", tensor<double>({1, 3, 2})}, {"pos", ps}}), value_error);
  CHECK_THROWS_WITH(run.forward({{"x", tensor<double>({1, 3, 2})}, {"pos", ps}}), Contains("-2") && Contains("[0, 2]"));
}

TEST_CASE("positional encoding passes gradcheck with and without positions") {
  param_store<double> p;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto xs = test::random_tensor<double>({2, 3, 4}, 2);
  SECTION("positions 0..T-1") {
    test::require_gradcheck(make_graph(add_positional_encoding(x)), p, {{"x", xs}});
  }
  SECTION("given positions") {
    auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
    tokens_t ps({2, 3}, {5, 6, 7, 0, 1, 2});
    test::require_gradcheck(make_graph(add_positional_encoding(x, pos)), p, {{"x", xs}, {"pos", ps}});
  }
}
