// The Transformer's building blocks: embedding, positional encoding, layer_norm, relu/gelu,
// dropout, mul, cross_entropy, and the nn layers made of them. Forward values against numbers
// worked by hand or computed with PyTorch 1.13 (the computation is quoted beside them);
// backward against central finite differences (gradcheck, double) for each shape case.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "loom/loom.hpp"
#include "loom/nn/layers.hpp"
#include "support/corruption.hpp"
#include "test_support.hpp"

using namespace loom;
using Catch::Matchers::Contains;

namespace {

using tokens_t = tensor<std::int32_t>;

// every element of `got` within `tol` of `expect`
template <class V>
void check_values(const V& got, const std::vector<double>& expect, double tol = 1e-9) {
  REQUIRE(got.size() == static_cast<std::int64_t>(expect.size()));
  for (std::size_t i = 0; i < expect.size(); ++i) {
    INFO("element " << i);
    CHECK(static_cast<double>(got[static_cast<std::int64_t>(i)]) == Approx(expect[i]).epsilon(0).margin(tol));
  }
}

template <class T>
std::vector<T> copy_of(tensor_view<const T> v) {
  return {v.data, v.data + v.size()};
}
template <class T>
std::vector<T> copy_of(const tensor<T>& t) {
  return {t.data(), t.data() + t.size()};
}

template <class T>
bool bit_identical(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Agreement expected with reference numbers given to 10 decimals: float or double rounding.
template <class T>
constexpr double tolerance = std::is_same_v<T, float> ? 2e-6 : 1e-9;

// The seed input of dropout: [2] ints.
tokens_t seed_of(std::int32_t seed, std::int32_t step) {
  return tokens_t({2}, {seed, step});
}

}  // namespace

// ---------------------------------------------------------------- embedding

TEST_CASE("embedding looks up one table row per token, for any leading dims") {
  auto tok = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
  auto w = param<"emb.weight", shape<fix<4>, fix<2>>>();
  auto g = make_graph(embedding(tok, w));
  static_assert(std::is_same_v<decltype(embedding(tok, w))::shape, shape<dyn<"B">, dyn<"T">, fix<2>>>);
  param_store<double> p;
  p.set("emb.weight", tensor<double>({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31}));
  auto run = g.executor<double>(p);
  tokens_t ts({2, 3}, {2, 0, 2, 1, 3, 0});
  run.forward({{"tok", ts}});
  REQUIRE(run.output().dims == dims_t{2, 3, 2});
  check_values(run.output(), {20, 21, 0, 1, 20, 21, 10, 11, 30, 31, 0, 1}, 0);
}

TEST_CASE("embedding's backward adds the rows of a repeated token into its table row") {
  auto tok = input<"tok", shape<fix<4>>, int>();
  auto w = param<"emb.weight", shape<fix<4>, fix<2>>>();
  auto g = make_graph(embedding(tok, w));
  param_store<double> p;
  p.set("emb.weight", tensor<double>({4, 2}));
  auto run = g.executor<double>(p);
  tokens_t ts({4}, {1, 3, 1, 1});
  run.forward({{"tok", ts}});
  std::vector<tensor<double>> dy{tensor<double>({4, 2}, {1, 2, 10, 20, 100, 200, 1000, 2000})};
  run.backward(dy);
  // row 1 = dy[0] + dy[2] + dy[3], row 3 = dy[1], rows 0 and 2 untouched
  check_values(p.grad("emb.weight"), {0, 0, 1101, 2202, 0, 0, 10, 20}, 0);
}

TEST_CASE("embedding passes gradcheck for batched, dynamic-length and one-axis tokens") {
  param_store<double> p;
  p.set("emb.weight", test::random_tensor<double>({5, 3}, 1));
  auto w = param<"emb.weight", shape<fix<5>, fix<3>>>();
  SECTION("tokens [B, T] with B = 2, repeated ids") {
    auto tok = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
    tokens_t ts({2, 3}, {4, 0, 4, 4, 2, 1});
    test::require_gradcheck(make_graph(embedding(tok, w)), p, {{"tok", ts}});
  }
  SECTION("tokens [T]") {
    auto tok = input<"tok", shape<dyn<"T">>, int>();
    tokens_t ts({5}, {3, 3, 0, 1, 3});
    test::require_gradcheck(make_graph(embedding(tok, w)), p, {{"tok", ts}});
  }
  SECTION("tokens [2, 2, 2] fixed") {
    auto tok = input<"tok", shape<fix<2>, fix<2>, fix<2>>, int>();
    tokens_t ts({2, 2, 2}, {0, 1, 2, 3, 4, 0, 0, 1});
    test::require_gradcheck(make_graph(embedding(tok, w)), p, {{"tok", ts}});
  }
}

TEST_CASE("a token id below 0 or at least V throws value_error naming its position and value") {
  auto tok = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
  auto w = param<"emb.weight", shape<fix<4>, fix<2>>>();
  auto g = make_graph(embedding(tok, w));
  param_store<double> p;
  p.set("emb.weight", tensor<double>({4, 2}));
  auto run = g.executor<double>(p);
  tokens_t too_big({2, 3}, {0, 1, 2, 3, 0, 7});
  CHECK_THROWS_AS(run.forward({{"tok", too_big}}), value_error);
  CHECK_THROWS_WITH(run.forward({{"tok", too_big}}), Contains("token id 7 at position [1, 2]") && Contains("[0, 4)"));
  tokens_t negative({2, 3}, {0, -1, 2, 3, 0, 1});
  CHECK_THROWS_WITH(run.forward({{"tok", negative}}), Contains("token id -1 at position [0, 1]"));
}

TEST_CASE("int64 token ids and lengths (PyTorch's default) are accepted where int32 ones are, and checked") {
  auto tok = input<"tok", shape<dyn<"B">, dyn<"T">>, std::int64_t>();  // the same input as with int
  auto len = input<"len", shape<dyn<"B">>, int>();
  auto w = param<"emb.weight", shape<fix<5>, fix<4>>>();
  auto e = embedding(tok, w);                                            // [B, T, 4]
  auto g = make_graph(softmax(mask_padding(matmul<false, true>(e, e), len)));
  auto p = g.make_params<double>(1);
  auto run32 = g.executor<double>(p), run64 = g.executor<double>(p);
  run32.forward({{"tok", tokens_t({2, 3}, {4, 1, 0, 2, 2, 3})}, {"len", tokens_t({2}, {3, 2})}});
  tensor<std::int64_t> ids({2, 3}, {4, 1, 0, 2, 2, 3}), lens({2}, {3, 2});
  run64.forward({{"tok", ids}, {"len", lens}});
  CHECK(test::same_bits(tensor<double>(run32.output()), tensor<double>(run64.output())));
  // a value past int32 names itself and its position; one inside int32 but past V is embedding's
  tensor<std::int64_t> huge({2, 3}, {4, 1, 0, 2, 5'000'000'000, 3});
  CHECK_THROWS_AS(run64.forward({{"tok", huge}, {"len", lens}}), value_error);
  CHECK_THROWS_WITH(run64.forward({{"tok", huge}, {"len", lens}}),
                    Contains("feed \"tok\"") && Contains("5000000000 at [1, 1]") && Contains("int32"));
  tensor<std::int64_t> past_v({2, 3}, {4, 1, 0, 2, 9, 3});
  CHECK_THROWS_WITH(run64.forward({{"tok", past_v}, {"len", lens}}), Contains("token id 9 at position [1, 1]"));
  test::require_gradcheck(g, p, {{"tok", ids}, {"len", lens}});
}

// ---------------------------------------------------------------- positional encoding

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

// ---------------------------------------------------------------- layer_norm

TEMPLATE_TEST_CASE("layer_norm matches PyTorch's F.layer_norm in values and gradients", "", float, double) {
  using T = TestType;
  auto x = input<"x", shape<dyn<"R">, fix<4>>>();
  auto gamma = param<"ln.weight", shape<fix<4>>>();
  auto beta = param<"ln.bias", shape<fix<4>>>();
  auto g = make_graph(layer_norm<1e-5>(x, gamma, beta));
  param_store<T> p;
  p.set("ln.weight", tensor<T>({4}, {0.5, 1.0, -1.5, 2.0}));
  p.set("ln.bias", tensor<T>({4}, {0.1, -0.2, 0.3, 0.0}));
  auto run = g.executor<T>(p, {.input_grads = true});
  tensor<T> xs({2, 4}, {1, 2, 3, 4, -0.5, 0.0, 2.5, 1.0});
  run.forward({{"x", xs}});
  // PyTorch 1.13, float64: y = F.layer_norm(x, (4,), gamma, beta, eps=1e-5); y.backward(dy)
  check_values(run.output(),
               {-0.57081771, -0.6472118067, -0.37081771, 2.6832708399,  //
                -0.4455426473, -0.8546511768, -1.9912791188, 0.4364341179},
               tolerance<T>);
  std::vector<tensor<T>> dy{tensor<T>({2, 4}, {0.3, -0.1, 0.2, 0.5, 1, 0, -1, 0.5})};
  run.backward(dy);
  check_values(run.input_grad("x"),
               {0.2817409159, -0.152052855, -0.5411254453, 0.4114373844,  //
                0.2493873618, -0.3740885244, 4.9878e-06, 0.1246961748},
               tolerance<T>);
  check_values(p.grad("ln.weight"), {-1.4935759207, 0.0447211807, -1.4380770512, 0.7799262395}, tolerance<T>);
  check_values(p.grad("ln.bias"), {1.3, -0.1, -0.8, 1.0}, tolerance<T>);
}

TEST_CASE("layer_norm passes gradcheck for x, gamma and beta") {
  param_store<double> p;
  p.set("ln.weight", test::random_tensor<double>({5}, 3));
  p.set("ln.bias", test::random_tensor<double>({5}, 4));
  auto gamma = param<"ln.weight", shape<fix<5>>>();
  auto beta = param<"ln.bias", shape<fix<5>>>();
  SECTION("[B, T, D], B = 2, dynamic B and T") {
    auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<5>>>();
    test::require_gradcheck(make_graph(layer_norm<1e-5>(x, gamma, beta)), p,
                            {{"x", test::random_tensor<double>({2, 3, 5}, 5)}});
  }
  SECTION("21 rows: a whole block of 16 rows, whose statistics are computed together, and a ragged one") {
    auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<5>>>();
    test::require_gradcheck(make_graph(layer_norm<1e-5>(x, gamma, beta)), p,
                            {{"x", test::random_tensor<double>({3, 7, 5}, 8)}});
  }
  SECTION("one row, eps 1e-6") {
    auto x = input<"x", shape<fix<1>, fix<5>>>();
    test::require_gradcheck(make_graph(layer_norm<1e-6>(x, gamma, beta)), p,
                            {{"x", test::random_tensor<double>({1, 5}, 6)}});
  }
  SECTION("a row of nearly equal values (variance near eps)") {
    auto x = input<"x", shape<fix<2>, fix<5>>>();
    tensor<double> xs({2, 5}, {0.3, 0.3001, 0.2999, 0.3, 0.30005, -1, 2, 0.5, 0.25, 1});
    test::require_gradcheck(make_graph(layer_norm<1e-5>(x, gamma, beta)), p, {{"x", xs}});
  }
}

// ---------------------------------------------------------------- relu, gelu

TEST_CASE("relu zeroes negatives and passes the gradient only where x > 0") {
  auto x = input<"x", shape<fix<5>>>();
  auto g = make_graph(relu(x));
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  tensor<double> xs({5}, {-2, -0.5, 0, 0.5, 3});
  run.forward({{"x", xs}});
  check_values(run.output(), {0, 0, 0, 0.5, 3}, 0);
  std::vector<tensor<double>> dy{tensor<double>({5}, {1, 2, 3, 4, 5})};
  run.backward(dy);
  check_values(run.input_grad("x"), {0, 0, 0, 4, 5}, 0);  // 0 at x = 0, as PyTorch
}

TEMPLATE_TEST_CASE("gelu matches PyTorch's exact (erf) gelu in values and derivatives", "", float, double) {
  using T = TestType;
  auto x = input<"x", shape<fix<7>>>();
  auto g = make_graph(gelu(x));
  param_store<T> p;
  auto run = g.executor<T>(p, {.input_grads = true});
  tensor<T> xs({7}, {-3, -1, -0.5, 0, 0.5, 1, 2});
  run.forward({{"x", xs}});
  // PyTorch 1.13, float64: y = F.gelu(x); y.sum().backward()
  check_values(run.output(),
               {-0.0040496941, -0.1586552539, -0.1542687694, 0.0, 0.3457312306, 0.8413447461, 1.9544997361},
               tolerance<T>);
  std::vector<tensor<T>> ones{tensor<T>({7}, std::vector<T>(7, T(1)))};
  run.backward(ones);
  check_values(run.input_grad("x"),
               {-0.0119456472, -0.0833154706, 0.1325048753, 0.5, 0.8674951247, 1.0833154706, 1.0852318011},
               tolerance<T>);
}

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

TEST_CASE("relu and gelu pass gradcheck on batched, dynamic shapes") {
  param_store<double> p;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  // inputs at least 0.05 away from relu's kink at 0, so finite differences stay on one side
  auto xs = test::random_tensor<double>({2, 3, 4}, 7);
  for (auto& v : xs.values()) v = v < 0 ? v - 0.05 : v + 0.05;
  SECTION("relu") {
    test::require_gradcheck(make_graph(relu(x)), p, {{"x", xs}});
  }
  SECTION("gelu") {
    auto wide = test::random_tensor<double>({2, 3, 4}, 8, -4, 4);
    test::require_gradcheck(make_graph(gelu(x)), p, {{"x", wide}});
  }
}

// ---------------------------------------------------------------- dropout

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

// ---------------------------------------------------------------- mul

TEST_CASE("mul multiplies elementwise, broadcasting a suffix-shaped operand") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<3>>>();
  auto s = input<"s", shape<fix<3>>>();
  static_assert(std::is_same_v<decltype(s * x), decltype(mul(x, s))>, "operator* broadcasts the smaller operand");
  auto g = make_graph(mul(x, s));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({2, 1, 3}, {1, 2, 3, 4, 5, 6}), ss({3}, {10, -1, 0.5});
  run.forward({{"x", xs}, {"s", ss}});
  check_values(run.output(), {10, -2, 1.5, 40, -5, 3}, 0);
}

TEST_CASE("mul passes gradcheck: same shapes, broadcast, and a node times itself") {
  param_store<double> p;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<3>>>();
  auto xs = test::random_tensor<double>({2, 3, 3}, 12);
  SECTION("same shapes") {
    auto y = input<"y", shape<dyn<"B">, dyn<"T">, fix<3>>>();
    test::require_gradcheck(make_graph(mul(x, y)), p, {{"x", xs}, {"y", test::random_tensor<double>({2, 3, 3}, 13)}});
  }
  SECTION("broadcast [T, 3] and [3]") {
    auto e = input<"e", shape<dyn<"T">, fix<3>>>();
    auto s = input<"s", shape<fix<3>>>();
    test::require_gradcheck(
        make_graph(mul(mul(x, e), s)), p,
        {{"x", xs}, {"e", test::random_tensor<double>({3, 3}, 14)}, {"s", test::random_tensor<double>({3}, 15)}});
  }
  SECTION("x * x") {
    test::require_gradcheck(make_graph(x * x), p, {{"x", xs}});
  }
}

// ---------------------------------------------------------------- cross_entropy

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

// ---------------------------------------------------------------- nn layers

TEST_CASE("nn layers name their parameters as PyTorch does and initialise them like it") {
  auto tok = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
  auto x = nn::embedding<"embed", 1000, 8>(tok);
  auto y = nn::feed_forward<"layers.0", 16>(nn::layer_norm<"layers.0.norm1">(x));
  auto g = make_graph(y);
  auto p = g.make_params<double>(1);
  CHECK(p.names() == std::vector<std::string>{"embed.weight", "layers.0.linear1.bias", "layers.0.linear1.weight",
                                              "layers.0.linear2.bias", "layers.0.linear2.weight", "layers.0.norm1.bias",
                                              "layers.0.norm1.weight"});
  CHECK(p.value("embed.weight").dims() == dims_t{1000, 8});
  CHECK(p.value("layers.0.linear1.weight").dims() == dims_t{16, 8});
  CHECK(p.value("layers.0.linear1.bias").dims() == dims_t{16});
  CHECK(p.value("layers.0.linear2.weight").dims() == dims_t{8, 16});
  CHECK(p.value("layers.0.linear2.bias").dims() == dims_t{8});
  for (double v : p.value("layers.0.norm1.weight").values()) CHECK(v == 1.0);
  for (double v : p.value("layers.0.norm1.bias").values()) CHECK(v == 0.0);
  // nn.Embedding: N(0, 1); 8000 draws put the sample mean within 0.05 and the sd within 0.05 of 1
  double mean = 0, sq = 0;
  for (double v : p.value("embed.weight").values()) mean += v;
  mean /= 8000;
  for (double v : p.value("embed.weight").values()) sq += (v - mean) * (v - mean);
  CHECK(std::abs(mean) < 0.05);
  CHECK(std::sqrt(sq / 7999) == Approx(1.0).margin(0.05));
}

TEST_CASE("nn::feed_forward computes linear2(act(linear1(x))) as PyTorch") {
  auto x = input<"x", shape<fix<1>, dyn<"T">, fix<2>>>();
  param_store<double> p;
  p.set("ff.linear1.weight", tensor<double>({3, 2}, {0.1, 0.2, -0.3, 0.4, 0.5, -0.6}));
  p.set("ff.linear1.bias", tensor<double>({3}, {0.01, -0.02, 0.03}));
  p.set("ff.linear2.weight", tensor<double>({2, 3}, {0.7, -0.8, 0.9, -1.0, 1.1, 0.2}));
  p.set("ff.linear2.bias", tensor<double>({2}, {0.05, -0.05}));
  tensor<double> xs({1, 2, 2}, {0.5, -1.0, 2.0, 0.25});
  // PyTorch 1.13, float64: F.linear(act(F.linear(x, w1, b1)), w2, b2)
  SECTION("relu (worked by hand too: hidden [0, 0, 0.88] and [0.26, 0, 0.88])") {
    auto run = make_graph(nn::feed_forward<"ff", 3>(x)).executor<double>(p);
    run.forward({{"x", xs}});
    check_values(run.output(), {0.842, 0.126, 1.024, -0.134}, 1e-12);
  }
  SECTION("gelu") {
    auto run = make_graph(nn::feed_forward<"ff", 3, nn::gelu_t>(x)).executor<double>(p);
    run.forward({{"x", xs}});
    check_values(run.output(), {0.7780858891, -0.0234138783, 0.9270763336, -0.2364835112});
  }
}

TEST_CASE("nn::feed_forward with dropout is the plain one when not training and passes gradcheck") {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto seed = input<"seed", shape<fix<2>>, int>();
  auto with_dropout = make_graph(nn::feed_forward<"ff", 6, nn::gelu_t, 0.3>(x, seed));
  auto plain = make_graph(nn::feed_forward<"ff", 6, nn::gelu_t>(x));
  auto p = with_dropout.make_params<double>(2);
  auto xs = test::random_tensor<double>({2, 3, 4}, 18);
  auto a = with_dropout.executor<double>(p, {.training = false});
  auto b = plain.executor<double>(p);
  a.forward({{"x", xs}, {"seed", seed_of(1, 0)}});
  b.forward({{"x", xs}});
  CHECK(copy_of(a.output()) == copy_of(b.output()));
  test::randomize(p, 3);
  test::require_gradcheck(with_dropout, p, {{"x", xs}, {"seed", seed_of(1, 0)}});
}

namespace {
// A Transformer-style stack: embed, add positions, pre-norm feed-forward with dropout and a
// residual, a final norm, a projection to the vocabulary and the loss (target 0 is padding).
constexpr auto small_stack_loss() {
  constexpr long vocab = 7, model = 4;
  auto tokens = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
  auto targets = input<"target", shape<dyn<"B">, dyn<"T">>, int>();
  auto seed = input<"seed", shape<fix<2>>, int>();
  auto embedded = add_positional_encoding(nn::embedding<"embed", vocab, model>(tokens));  // [B, T, D]
  auto hidden = embedded + nn::feed_forward<"ff", 8, nn::gelu_t, 0.2>(nn::layer_norm<"norm1">(embedded), seed);
  auto logits = nn::linear<"out", vocab>(nn::layer_norm<"norm2">(hidden));  // [B, T, V]
  return cross_entropy<0, 0.1>(logits, targets);
}
}  // namespace

TEST_CASE("a small Transformer-style stack passes gradcheck end to end") {
  auto g = make_graph(small_stack_loss());
  auto p = g.make_params<double>(4);
  test::randomize(p, 5);
  tokens_t ts({2, 3}, {1, 6, 6, 2, 0, 0});
  tokens_t targets_fed({2, 3}, {6, 6, 3, 5, 0, 0});
  test::require_gradcheck(g, p, {{"tok", ts}, {"target", targets_fed}, {"seed", seed_of(9, 1)}});
}

TEST_CASE("gradcheck notices when the backward of any of these ops adds its gradient twice") {
  auto g = make_graph(small_stack_loss());
  auto p = g.make_params<double>(4);
  test::randomize(p, 5);
  tokens_t ts({2, 3}, {1, 6, 6, 2, 0, 0});
  tokens_t targets_fed({2, 3}, {6, 6, 3, 5, 0, 0});
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  auto y = input<"y", shape<fix<3>>>();
  auto relu_mul = make_graph(relu(x) * y);
  tensor<double> xs({2, 3}, {0.5, -1, 2, 1, 1.5, -0.5}), ys({3}, {0.3, -0.7, 1.1});
  const op_entry* in_stack[] = {&entry_of<embedding_op>, &entry_of<positional_encoding_def>, &entry_of<layer_norm_def>,
                                &entry_of<gelu_op>,      &entry_of<dropout_def>,             &entry_of<cross_entropy_def>};
  for (const op_entry* op : in_stack) {
    INFO(op->name);
    testing::scoped_corruption broken(*op, testing::corruption::run_twice);
    CHECK_FALSE(gradcheck(g, p, {{"tok", ts}, {"target", targets_fed}, {"seed", seed_of(9, 1)}}, {.fuse = 0}).ok);  // the primitives, unfused
  }
  for (const op_entry* op : {&entry_of<relu_op>, &entry_of<mul_op>}) {
    INFO(op->name);
    testing::scoped_corruption broken(*op, testing::corruption::run_twice);
    CHECK_FALSE(gradcheck(relu_mul, p, {{"x", xs}, {"y", ys}}).ok);
  }
  CHECK(gradcheck(relu_mul, p, {{"x", xs}, {"y", ys}}).ok);  // and the kernels are restored
}

TEST_CASE("the stack's loss and gradients are bit-identical for 1, 2 and 4 threads") {
  // large enough that embedding, layer_norm, mul and cross_entropy split into several chunks
  auto big_x = input<"x", shape<dyn<"B">, dyn<"T">, fix<256>>>();
  auto big_tok = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
  auto big_seed = input<"seed", shape<fix<2>>, int>();
  auto e = nn::embedding<"embed", 50, 256>(big_tok);
  auto n = nn::layer_norm<"norm">(dropout<0.1>(e, big_seed) * param<"gate", shape<fix<256>>, init<init_kind::ones>>());
  auto big_loss = cross_entropy<-100, 0.1>(mul(n, big_x), big_tok);
  auto g = make_graph(big_loss);
  rng gen(6);
  tokens_t ts({8, 128});
  for (auto& t : ts.values()) t = static_cast<std::int32_t>(gen.below(5)) * 10;  // few ids, many repeats
  auto xs = test::random_tensor<float>({8, 128, 256}, 7);
  auto run = [&](int threads) {
    auto p = g.make_params<float>(8);
    auto ex = g.executor<float>(p, {.threads = threads});
    ex.forward({{"x", xs}, {"tok", ts}, {"seed", seed_of(1, 1)}});
    ex.backward();
    std::vector<float> all{ex.output()[0]};
    for (auto& [name, entry] : p) all.insert(all.end(), entry.grad.values().begin(), entry.grad.values().end());
    return all;
  };
  const auto one = run(1);
  CHECK(bit_identical(one, run(2)));
  CHECK(bit_identical(one, run(4)));
}
