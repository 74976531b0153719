// rope in both layouts: forward and backward against a naive double rotation written from the
// formula (rope.hpp), gradcheck, decoding and layout identities, bad inputs, empty inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using Catch::Matchers::Contains;
using namespace op_test;
using namespace op_test::double_reference;

namespace {

/// RoPE by its definition: row k of x (dh values) rotated by position_of(k) · theta^(−2i/dh);
/// sign −1 rotates back (the gradient).
std::vector<double> rope_naive(const std::vector<double>& x, std::size_t dh,
                               const std::function<std::int64_t(std::size_t)>& position_of, bool interleaved,
                               double theta = 10000, double sign = 1) {
  std::vector<double> y(x.size());
  const std::size_t h = dh / 2;
  for (std::size_t k = 0; k < x.size() / dh; ++k)
    for (std::size_t i = 0; i < h; ++i) {
      const double angle = static_cast<double>(position_of(k)) *
                           std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dh));
      const double c = std::cos(angle), s = sign * std::sin(angle);
      const std::size_t a = k * dh + (interleaved ? 2 * i : i), b = k * dh + (interleaved ? 2 * i + 1 : i + h);
      y[a] = x[a] * c - x[b] * s;
      y[b] = x[b] * c + x[a] * s;
    }
  return y;
}

}  // namespace

TEMPLATE_TEST_CASE("rope rotates each pair of dims by pos · theta^(-2i/Dh) in both layouts, and back in backward", "",
                   float, double) {
  using T = TestType;
  constexpr long B = 2, H = 3, Tn = 4, Dh = 6;
  auto x = input<"x", shape<dyn<"B">, fix<H>, dyn<"T">, fix<Dh>>>();
  auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
  const auto xs = test::random_tensor<T>({B, H, Tn, Dh}, 10), dy = test::random_tensor<T>({B, H, Tn, Dh}, 11);
  const tokens_t ps = positions_from({0, 37}, Tn);
  // row k of x is (b, h, t): its position is ps[b, t]
  auto position_of = [&](std::size_t k) -> std::int64_t {
    const auto b = static_cast<std::int64_t>(k) / (H * Tn), t = static_cast<std::int64_t>(k) % Tn;
    return ps[b * Tn + t];
  };
  auto check_layout = [&](auto g, bool interleaved, double theta) {
    param_store<T> p;
    auto run = g.template executor<T>(p, {.input_grads = true});
    run.forward({{"x", xs}, {"pos", ps}});
    run.backward(std::vector<tensor<T>>{dy});
    check_near(doubles(run.output()), rope_naive(doubles(xs), Dh, position_of, interleaved, theta), tolerance<T>);
    check_near(doubles(run.input_grad("x")), rope_naive(doubles(dy), Dh, position_of, interleaved, theta, -1),
               tolerance<T>);
  };
  SECTION("rotate_half") {
    check_layout(make_graph(rope<rope_layout::rotate_half>(x, pos)), false, 10000);
  }
  SECTION("interleaved") {
    check_layout(make_graph(rope<rope_layout::interleaved>(x, pos)), true, 10000);
  }
  SECTION("rotate_half, theta 500000") {
    check_layout(make_graph(rope<rope_layout::rotate_half, 500000.0>(x, pos)), false, 500000);
  }
}

TEST_CASE("rope passes gradcheck in x for both layouts, offsets and position shapes") {
  param_store<double> p;
  auto x = input<"x", shape<dyn<"B">, fix<2>, dyn<"T">, fix<8>>>();
  const auto xs = test::random_tensor<double>({2, 2, 3, 8}, 12);
  SECTION("rotate_half, positions [B, T] with offsets 5 and 1000") {
    auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
    test::require_gradcheck(make_graph(rope<rope_layout::rotate_half>(x, pos)), p,
                            {{"x", xs}, {"pos", positions_from({5, 1000}, 3)}});
  }
  SECTION("interleaved, positions [B, T] with offsets 0 and 17") {
    auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
    test::require_gradcheck(make_graph(rope<rope_layout::interleaved>(x, pos)), p,
                            {{"x", xs}, {"pos", positions_from({0, 17}, 3)}});
  }
  SECTION("interleaved, positions [T] shared by every sequence") {
    auto pos = input<"pos", shape<dyn<"T">>, int>();
    test::require_gradcheck(make_graph(rope<rope_layout::interleaved>(x, pos)), p,
                            {{"x", xs}, {"pos", tokens_t({3}, {2, 9, 4})}});
  }
  SECTION("rotate_half on x [B, T, Dh] (no head axis), theta 500000") {
    auto x3 = input<"x3", shape<dyn<"B">, dyn<"T">, fix<4>>>();
    auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
    test::require_gradcheck(make_graph(rope<rope_layout::rotate_half, 500000.0>(x3, pos)), p,
                            {{"x3", test::random_tensor<double>({2, 3, 4}, 13)}, {"pos", positions_from({3, 40}, 3)}});
  }
  SECTION("in a graph that reads x again (rope not run in place)") {
    auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
    test::require_gradcheck(make_graph(rope<rope_layout::rotate_half>(x, pos) * x), p,
                            {{"x", xs}, {"pos", positions_from({2, 7}, 3)}});
  }
}

TEMPLATE_TEST_CASE("rope of the last T steps at positions P.. equals the last T rows of rope over the whole sequence",
                   "", float, double) {
  using T = TestType;
  constexpr long H = 2, P = 5, Tn = 3, Dh = 8;
  auto x = input<"x", shape<fix<1>, fix<H>, dyn<"T">, fix<Dh>>>();
  auto pos = input<"pos", shape<fix<1>, dyn<"T">>, int>();
  auto check = [&](auto g) {
    param_store<T> p;
    auto run = g.template executor<T>(p);
    const auto whole = test::random_tensor<T>({1, H, P + Tn, Dh}, 14);
    run.forward({{"x", whole}, {"pos", positions_from({0}, P + Tn)}});
    const tensor<T> all(run.output());
    tensor<T> last(dims_t{1, H, Tn, Dh});
    for (long h = 0; h < H; ++h)
      for (long t = 0; t < Tn; ++t)
        for (long j = 0; j < Dh; ++j) last.at({0, h, t, j}) = whole.at({0, h, P + t, j});
    run.forward({{"x", last}, {"pos", positions_from({P}, Tn)}});
    const tensor<T> step(run.output());
    for (long h = 0; h < H; ++h)
      for (long t = 0; t < Tn; ++t)
        for (long j = 0; j < Dh; ++j) {
          INFO("head " << h << ", step " << t << ", dim " << j);
          CHECK(step.at({0, h, t, j}) == all.at({0, h, P + t, j}));
        }
  };
  SECTION("rotate_half") {
    check(make_graph(rope<rope_layout::rotate_half>(x, pos)));
  }
  SECTION("interleaved") {
    check(make_graph(rope<rope_layout::interleaved>(x, pos)));
  }
}

TEST_CASE(
    "rope in the rotate_half layout equals the interleaved layout on x with dims i, i + Dh/2 moved to 2i, 2i + 1") {
  constexpr long Dh = 8, h = Dh / 2;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<Dh>>>();
  auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
  param_store<double> p;
  auto half = make_graph(rope<rope_layout::rotate_half>(x, pos)).executor<double>(p);
  auto pairs = make_graph(rope<rope_layout::interleaved>(x, pos)).executor<double>(p);
  const auto xs = test::random_tensor<double>({2, 3, Dh}, 15);
  const tokens_t ps = positions_from({4, 250}, 3);
  tensor<double> permuted(xs.dims());
  for (std::int64_t r = 0; r < 6; ++r)
    for (long i = 0; i < h; ++i) {
      permuted[r * Dh + 2 * i] = xs[r * Dh + i];
      permuted[r * Dh + 2 * i + 1] = xs[r * Dh + i + h];
    }
  half.forward({{"x", xs}, {"pos", ps}});
  pairs.forward({{"x", permuted}, {"pos", ps}});
  const auto y_half = half.output(), y_pairs = pairs.output();
  for (std::int64_t r = 0; r < 6; ++r)
    for (long i = 0; i < h; ++i) {
      INFO("row " << r << ", pair " << i);
      CHECK(y_half[r * Dh + i] == Approx(y_pairs[r * Dh + 2 * i]).epsilon(1e-15).margin(1e-15));
      CHECK(y_half[r * Dh + i + h] == Approx(y_pairs[r * Dh + 2 * i + 1]).epsilon(1e-15).margin(1e-15));
    }
}

TEST_CASE("rope without positions rotates row t by position t: it equals rope at 0..T-1 and passes gradcheck") {
  param_store<double> p;
  auto x = input<"x", shape<dyn<"B">, fix<2>, dyn<"T">, fix<6>>>();
  auto pos = input<"pos", shape<dyn<"T">>, int>();
  const auto xs = test::random_tensor<double>({2, 2, 5, 6}, 21);
  auto check = [&]<rope_layout L>() {
    auto implicit = make_graph(rope<L, 500.0>(x) * x);
    auto given = make_graph(rope<L, 500.0>(x, pos) * x);
    auto a = implicit.template executor<double>(p);
    auto b = given.template executor<double>(p);
    a.forward({{"x", xs}});
    b.forward({{"x", xs}, {"pos", tokens_t({5}, {0, 1, 2, 3, 4})}});
    REQUIRE(a.output().dims == b.output().dims);
    CHECK(std::memcmp(a.output().data, b.output().data, sizeof(double) * static_cast<std::size_t>(xs.size())) == 0);
    test::require_gradcheck(implicit, p, {{"x", xs}});
  };
  check.template operator()<rope_layout::rotate_half>();
  check.template operator()<rope_layout::interleaved>();
}

TEST_CASE("rope refuses an odd named head dim at binding and a negative position at forward") {
  param_store<double> p;
  SECTION("odd Dh") {
    auto x = input<"x", shape<fix<1>, dyn<"T">, dyn<"Dh">>>();
    auto pos = input<"pos", shape<fix<1>, dyn<"T">>, int>();
    auto run = make_graph(rope<rope_layout::rotate_half>(x, pos)).executor<double>(p);
    const auto feed_odd = [&] { run.forward({{"x", tensor<double>({1, 2, 5})}, {"pos", tokens_t({1, 2}, {0, 1})}}); };
    CHECK_THROWS_AS(feed_odd(), shape_error);
    CHECK_THAT(test::message_of(feed_odd), Contains("rope") && Contains("[1, 2, 5]") && Contains("even"));
  }
  SECTION("negative position") {
    auto x = input<"x", shape<dyn<"B">, fix<2>, dyn<"T">, fix<4>>>();
    auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
    auto run = make_graph(rope<rope_layout::interleaved>(x, pos)).executor<double>(p);
    const auto feed_negative = [&] {
      run.forward({{"x", tensor<double>({2, 2, 3, 4})}, {"pos", tokens_t({2, 3}, {0, 1, 2, 7, -3, 9})}});
    };
    CHECK_THROWS_AS(feed_negative(), value_error);
    CHECK_THAT(test::message_of(feed_negative), Contains("rope") && Contains("-3") && Contains("[1, 1]"));
  }
}

TEST_CASE("rope of no steps or of a batch of 0 is empty, forward and backward") {
  auto x = input<"x", shape<dyn<"B">, fix<2>, dyn<"T">, fix<4>>>();
  auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
  auto g = make_graph(sum(rope<rope_layout::rotate_half>(x, pos)));
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  for (dims_t d : {dims_t{2, 2, 0, 4}, dims_t{0, 2, 3, 4}}) {
    INFO("x " << d.str());
    run.forward({{"x", tensor<double>(d)}, {"pos", tokens_t(dims_t{d[0], d[2]})}});
    CHECK(run.output()[0] == 0);
    run.backward();
    CHECK(run.input_grad("x").dims == d);
  }
}
