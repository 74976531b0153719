// The ops of Llama- and GPT-2-style decoders: rms_norm, rope (both layouts) and gelu_tanh.
// Forward and backward against naive double implementations written here from the formulas
// (include/loom/ops/norm.hpp, rope.hpp, gelu_tanh.hpp), gradients against central finite
// differences (gradcheck, double), rope's decoding and layout identities, bad inputs, and the
// same bits for any thread count.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <vector>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;
using Catch::Matchers::Contains;

namespace {

using tokens_t = tensor<std::int32_t>;

// Agreement with a double reference: float rounding (values of order 1) or double rounding.
template <class T> constexpr double tolerance = std::is_same_v<T, float> ? 2e-6 : 1e-12;

template <class T> std::vector<double> doubles(tensor_view<const T> v) {
  return {v.data, v.data + v.size()};
}
template <class T> std::vector<double> doubles(const tensor<T>& t) {
  return {t.data(), t.data() + t.size()};
}

void check_near(const std::vector<double>& got, const std::vector<double>& expect, double tol) {
  REQUIRE(got.size() == expect.size());
  for (std::size_t i = 0; i < expect.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " against " << expect[i]);
    CHECK(std::abs(got[i] - expect[i]) <= tol * (1 + std::abs(expect[i])));
  }
}

template <class T> bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// ---- references, from the formulas -----------------------------------------------------------

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

/// GELU's tanh form and its derivative, from the formula.
double gelu_tanh_naive(double x) {
  const double k = std::sqrt(2 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double gelu_tanh_slope_naive(double x) {
  const double k = std::sqrt(2 / std::numbers::pi), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

/// Positions [B, T]: sequence b starts at offsets[b].
tokens_t positions_from(const std::vector<std::int32_t>& offsets, std::int32_t t) {
  std::vector<std::int32_t> p;
  for (std::int32_t o : offsets)
    for (std::int32_t s = 0; s < t; ++s) p.push_back(o + s);
  return tokens_t({static_cast<std::int64_t>(offsets.size()), t}, p);
}

}  // namespace

// ---------------------------------------------------------------- rms_norm

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

// ---------------------------------------------------------------- rope

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

// ---------------------------------------------------------------- gelu_tanh

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

// ---------------------------------------------------------------- the three together

TEST_CASE("rms_norm, rope and gelu_tanh give the same bits for 1, 2 and 4 threads") {
  // large enough that every kernel splits into several chunks
  auto x = input<"x", shape<dyn<"B">, fix<4>, dyn<"T">, fix<64>>>();
  auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
  auto w = param<"w", shape<fix<64>>>();
  auto y = gelu_tanh(rms_norm<1e-6>(rope<rope_layout::rotate_half>(x, pos), w)) * x;
  auto g = make_graph(sum(rope<rope_layout::interleaved>(y, pos)));
  const auto xs = test::random_tensor<float>({4, 4, 500, 64}, 19);
  const tokens_t ps = positions_from({0, 3, 100, 4000}, 500);
  auto run = [&](int threads) {
    param_store<float> p;
    p.set("w", test::random_tensor<float>({64}, 20, -2, 2));
    auto ex = g.executor<float>(p, {.threads = threads, .input_grads = true});
    ex.forward({{"x", xs}, {"pos", ps}});
    ex.backward();
    std::vector<float> all{ex.output()[0]};
    const auto dx = ex.input_grad("x");
    all.insert(all.end(), dx.data, dx.data + dx.size());
    for (auto& [name, entry] : p) all.insert(all.end(), entry.grad.values().begin(), entry.grad.values().end());
    return all;
  };
  const auto one = run(1);
  CHECK(same_bits(one, run(2)));
  CHECK(same_bits(one, run(4)));
}

TEST_CASE("rope, gelu_tanh and rms_norm running in place give the same bits as with separate buffers") {
  auto x = input<"x", shape<dyn<"B">, fix<2>, dyn<"T">, fix<6>>>();
  auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
  auto w = param<"w", shape<fix<6>>>();
  const auto xs = test::random_tensor<double>({3, 2, 4, 6}, 21);
  const tokens_t ps = positions_from({0, 9, 2}, 4);
  auto run = [&](auto g, exec_options o) {
    param_store<double> p;
    p.set("w", test::random_tensor<double>({6}, 22, -2, 2));
    auto ex = g.template executor<double>(p, o);
    ex.forward({{"x", xs}, {"pos", ps}});
    std::vector<double> r = doubles(ex.output());
    if (o.inference) return r;
    ex.backward();
    const auto dx = ex.input_grad("x");
    r.insert(r.end(), dx.data, dx.data + dx.size());
    r.insert(r.end(), p.grad("w").values().begin(), p.grad("w").values().end());
    return r;
  };
  SECTION("training: rope over scale's buffer, and each backward over its output's gradient") {
    auto g = make_graph(sum(mul(gelu_tanh(rope<rope_layout::interleaved>(scale<1.5>(x), pos)), w)));
    CHECK(same_bits(run(g, {.input_grads = true, .keep_all = true}), run(g, {.input_grads = true})));
    const auto plan = g.memory_plan<double>({{"B", 3}, {"T", 4}}, {.input_grads = true});
    INFO(plan.str(-1));
    CHECK(plan.in_place >= 1);  // rope's value in scale's buffer (the gradients' merges are not counted)
  }
  SECTION("inference: rms_norm and gelu_tanh over their inputs' buffers") {
    auto g = make_graph(gelu_tanh(rms_norm<1e-6>(rope<rope_layout::rotate_half>(scale<1.5>(x), pos), w)));
    CHECK(same_bits(run(g, {.inference = true, .keep_all = true}), run(g, {.inference = true})));
    const auto plan = g.memory_plan<double>({{"B", 3}, {"T", 4}}, {.inference = true});
    INFO(plan.str(-1));
    CHECK(plan.in_place >= 2);
  }
}
