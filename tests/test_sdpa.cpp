// nn::attention with the options of PyTorch's scaled_dot_product_attention — scale, is_causal,
// boolean and float masks broadcast onto the scores, dropout on the weights, grouped-query and
// multi-query attention — against the formula written out with loops here (double), and every
// option through gradcheck. Custom masks, masks per sequence and per key, and bias-free layers.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

/// softmax(scale · q kᵀ + bias) v for q [B, Hq, T, d], k [B, Hkv, S, d], v [B, Hkv, S, dv]
/// (head h reads key/value head h / (Hq / Hkv), PyTorch's repeat_interleave), written out.
/// bias(b, h, i, j) is added to the score (−∞: masked); a row with every key masked is 0.
tensor<double> reference(const tensor<double>& q, const tensor<double>& k, const tensor<double>& v, double scale,
                         const std::function<double(std::int64_t, std::int64_t, std::int64_t, std::int64_t)>& bias) {
  const std::int64_t B = q.dim(0), Hq = q.dim(1), T = q.dim(2), d = q.dim(3);
  const std::int64_t Hkv = k.dim(1), S = k.dim(2), dv = v.dim(3), G = Hq / Hkv;
  tensor<double> out(dims_t{B, Hq, T, dv});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<std::size_t>(S));
        double mx = -inf;
        for (std::int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < d; ++c) dot += q.at({b, h, i, c}) * k.at({b, h / G, j, c});
          s[static_cast<std::size_t>(j)] = scale * dot + bias(b, h, i, j);
          mx = std::max(mx, s[static_cast<std::size_t>(j)]);
        }
        if (mx == -inf) continue;  // every key masked: zeros
        double total = 0;
        for (auto& x : s) total += (x = std::exp(x - mx));
        for (std::int64_t c = 0; c < dv; ++c) {
          double o = 0;
          for (std::int64_t j = 0; j < S; ++j) o += s[static_cast<std::size_t>(j)] / total * v.at({b, h / G, j, c});
          out.at({b, h, i, c}) = o;
        }
      }
  return out;
}

double max_diff(tensor_view<const double> a, const tensor<double>& b) {
  REQUIRE(a.dims == b.dims());
  double worst = 0;
  for (std::int64_t i = 0; i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

/// The output of g's forward on `feeds`, fused and unfused, each against `want`.
template <class G>
void require_output(const G& g, std::initializer_list<feed> feeds, const tensor<double>& want) {
  param_store<double> none;
  for (bool fuse : {false, true}) {
    INFO((fuse ? "fused" : "unfused"));
    auto ex = g.template executor<double>(none, {.fuse = fuse});
    ex.forward(feeds);
    CHECK(max_diff(ex.output(), want) < 1e-12);
  }
}

constexpr long d = 3, dv = 2;
template <long H>
using Q = input_node<"q", shape<dyn<"B">, fix<H>, dyn<"T">, fix<d>>>;
template <long H>
using K = input_node<"k", shape<dyn<"B">, fix<H>, dyn<"S">, fix<d>>>;
template <long H>
using V = input_node<"v", shape<dyn<"B">, fix<H>, dyn<"S">, fix<dv>>>;
using Len = input_node<"len", shape<dyn<"B">>, int>;

struct qkv {
  tensor<double> q, k, v;
  qkv(std::int64_t b, std::int64_t hq, std::int64_t hkv, std::int64_t t, std::int64_t s)
      : q(test::random_tensor<double>({b, hq, t, d}, 1)),
        k(test::random_tensor<double>({b, hkv, s, d}, 2)),
        v(test::random_tensor<double>({b, hkv, s, dv}, 3)) {}
};

auto no_bias = [](std::int64_t, std::int64_t, std::int64_t, std::int64_t) { return 0.0; };

}  // namespace

TEST_CASE("attention's default scale is 1/sqrt(d) and a custom scale replaces it") {
  const qkv x(2, 2, 2, 3, 4);
  require_output(make_graph(nn::attention(Q<2>{}, K<2>{}, V<2>{})), {{"q", x.q}, {"k", x.k}, {"v", x.v}},
                 reference(x.q, x.k, x.v, 1 / std::sqrt(3.0), no_bias));
  require_output(make_graph(nn::attention<{.scale = 0.7}>(Q<2>{}, K<2>{}, V<2>{})), {{"q", x.q}, {"k", x.k}, {"v", x.v}},
                 reference(x.q, x.k, x.v, 0.7, no_bias));
  require_output(make_graph(nn::attention<{.scale = 1.0}>(Q<2>{}, K<2>{}, V<2>{})), {{"q", x.q}, {"k", x.k}, {"v", x.v}},
                 reference(x.q, x.k, x.v, 1.0, no_bias));
}

TEST_CASE("is_causal hides keys j > i + (S - T): bottom-right aligned, as nn::causal") {
  const qkv x(2, 2, 2, 3, 5);
  auto causal = [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) { return j > i + 2 ? -inf : 0.0; };
  const auto want = reference(x.q, x.k, x.v, 1 / std::sqrt(3.0), causal);
  require_output(make_graph(nn::attention<{.is_causal = true}>(Q<2>{}, K<2>{}, V<2>{})),
                 {{"q", x.q}, {"k", x.k}, {"v", x.v}}, want);
  require_output(make_graph(nn::attention(Q<2>{}, K<2>{}, V<2>{}, nn::causal)), {{"q", x.q}, {"k", x.k}, {"v", x.v}},
                 want);
}

TEST_CASE("a float mask is added to the scores, broadcast from [T, S], [B, 1, T, S] and [B, H, T, S]") {
  const qkv x(2, 2, 2, 3, 4);
  const double c = 1 / std::sqrt(3.0);
  SECTION("[T, S], with -inf entries") {
    auto m = test::random_tensor<double>({3, 4}, 9);
    m[1] = -inf;
    m[4 + 2] = -inf;
    auto f = input<"m", shape<dyn<"T">, dyn<"S">>>();
    require_output(make_graph(nn::attention(Q<2>{}, K<2>{}, V<2>{}, nn::additive(f))),
                   {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"m", m}},
                   reference(x.q, x.k, x.v, c, [&](auto, auto, auto i, auto j) { return m.at({i, j}); }));
  }
  SECTION("[B, 1, T, S]") {
    auto m = test::random_tensor<double>({2, 1, 3, 4}, 10, -2, 2);
    auto f = input<"m", shape<dyn<"B">, fix<1>, dyn<"T">, dyn<"S">>>();
    require_output(make_graph(nn::attention(Q<2>{}, K<2>{}, V<2>{}, nn::additive(f))),
                   {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"m", m}},
                   reference(x.q, x.k, x.v, c, [&](auto b, auto, auto i, auto j) { return m.at({b, 0, i, j}); }));
  }
  SECTION("[B, H, T, S], composed with is_causal and a padding mask") {
    auto m = test::random_tensor<double>({2, 2, 3, 4}, 11, -2, 2);
    auto f = input<"m", shape<dyn<"B">, fix<2>, dyn<"T">, dyn<"S">>>();
    tensor<std::int32_t> len({2}, {4, 2});
    require_output(make_graph(nn::attention<{.is_causal = true}>(Q<2>{}, K<2>{}, V<2>{}, nn::additive(f), nn::padding(Len{}))),
                   {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"m", m}, {"len", len}},
                   reference(x.q, x.k, x.v, c, [&](auto b, auto h, auto i, auto j) {
                     return j > i + 1 || j >= len[b] ? -inf : m.at({b, h, i, j});
                   }));
  }
}

TEST_CASE("a boolean mask broadcasts like a float one: [T, S], [B, 1, T, S], per sequence [B, T, S], per key [B, S]") {
  const qkv x(2, 2, 2, 3, 4);
  const double c = 1 / std::sqrt(3.0);
  tensor<std::uint8_t> m3(dims_t{2, 3, 4});
  for (std::int64_t i = 0; i < m3.size(); ++i) m3[i] = static_cast<std::uint8_t>((i * 5) % 3 != 0);
  SECTION("[B, T, S]: the same mask for every head of a sequence") {
    auto m = input<"m", shape<dyn<"B">, dyn<"T">, dyn<"S">>, bool>();
    require_output(make_graph(nn::attention(Q<2>{}, K<2>{}, V<2>{}, nn::allowed(m))),
                   {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"m", m3}},
                   reference(x.q, x.k, x.v, c, [&](auto b, auto, auto i, auto j) { return m3.at({b, i, j}) ? 0.0 : -inf; }));
  }
  SECTION("[B, S]: keys hidden per sequence") {
    tensor<std::uint8_t> keys({2, 4}, {1, 0, 1, 1, 0, 0, 1, 1});
    auto m = input<"m", shape<dyn<"B">, dyn<"S">>, bool>();
    require_output(make_graph(nn::attention(Q<2>{}, K<2>{}, V<2>{}, nn::allowed(m))),
                   {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"m", keys}},
                   reference(x.q, x.k, x.v, c, [&](auto b, auto, auto, auto j) { return keys.at({b, j}) ? 0.0 : -inf; }));
  }
  SECTION("[B, T, S] as a float mask") {
    auto f3 = test::random_tensor<double>({2, 3, 4}, 12);
    auto m = input<"m", shape<dyn<"B">, dyn<"T">, dyn<"S">>>();
    require_output(make_graph(nn::attention(Q<2>{}, K<2>{}, V<2>{}, nn::additive(m))),
                   {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"m", f3}},
                   reference(x.q, x.k, x.v, c, [&](auto b, auto, auto i, auto j) { return f3.at({b, i, j}); }));
  }
}

namespace {
// A user's own mask: a band of keys |i - j| <= 1 around each query (T = S), from primitives.
struct band_mask {
  template <class S>
  constexpr auto operator()(S scores) const {
    return mask_bool(scores, input<"band", shape<dyn<"T">, dyn<"S">>, bool>());
  }
};
}  // namespace

TEST_CASE("a user-defined mask composes with the built-in ones, in order") {
  const qkv x(2, 2, 2, 4, 4);
  tensor<std::uint8_t> band(dims_t{4, 4});
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 4; ++j) band.at({i, j}) = std::abs(i - j) <= 1;
  tensor<std::int32_t> len({2}, {4, 3});
  auto g = make_graph(nn::attention(Q<2>{}, K<2>{}, V<2>{}, nn::causal, band_mask{}, nn::padding(Len{})));
  require_output(g, {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"band", band}, {"len", len}},
                 reference(x.q, x.k, x.v, 1 / std::sqrt(3.0), [&](auto b, auto, auto i, auto j) {
                   return j > i || std::abs(i - j) > 1 || j >= len[b] ? -inf : 0.0;
                 }));
  auto p = g.make_params<double>(1);
  test::require_gradcheck(g, p, {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"band", band}, {"len", len}});
}

TEMPLATE_TEST_CASE_SIG("grouped-query attention reads each key/value head for its Hq/Hkv query heads", "",
                       ((long Hq, long Hkv), Hq, Hkv), (4, 2), (4, 1), (8, 2), (2, 1)) {
  const qkv x(2, Hq, Hkv, 3, 5);
  auto len = tensor<std::int32_t>({2}, {5, 3});
  auto g = make_graph(nn::attention<{.is_causal = true, .enable_gqa = true}>(Q<Hq>{}, K<Hkv>{}, V<Hkv>{}, nn::padding(Len{})));
  require_output(g, {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"len", len}},
                 reference(x.q, x.k, x.v, 1 / std::sqrt(3.0),
                           [&](auto b, auto, auto i, auto j) { return j > i + 2 || j >= len[b] ? -inf : 0.0; }));
  auto p = g.template make_params<double>(1);
  for (int fuse : {0, 1}) {
    INFO("fuse " << fuse);
    test::require_gradcheck(g, p, {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"len", len}}, {.fuse = fuse});
  }
}

TEST_CASE("every option passes gradcheck, the float mask's own gradient included") {
  const qkv x(2, 4, 2, 3, 4);
  auto m = test::random_tensor<double>({2, 1, 3, 4}, 13);
  auto f = input<"m", shape<dyn<"B">, fix<1>, dyn<"T">, dyn<"S">>>();
  auto g = make_graph(
      nn::attention<{.scale = 0.4, .is_causal = true, .enable_gqa = true}>(Q<4>{}, K<2>{}, V<2>{}, nn::additive(f)));
  auto p = g.make_params<double>(1);
  for (int fuse : {0, 1}) {
    INFO("fuse " << fuse);
    test::require_gradcheck(g, p, {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"m", m}}, {.fuse = fuse});
  }
}

TEST_CASE("dropout on the weights: seeded, only in training, and through gradcheck") {
  const qkv x(2, 2, 2, 3, 4);
  auto seed_node = input<"seed", shape<fix<2>>, int>();
  auto g = make_graph(nn::attention<{.dropout = 0.5}>(Q<2>{}, K<2>{}, V<2>{}, nn::dropout_seed(seed_node)));
  tensor<std::int32_t> seed({2}, {7, 1}), other({2}, {7, 2});
  param_store<double> none;
  auto run = [&](const tensor<std::int32_t>& s, bool training) {
    auto ex = g.executor<double>(none, {.training = training});
    ex.forward({{"q", x.q}, {"k", x.k}, {"v", x.v}, {"seed", s}});
    return tensor<double>(ex.output());
  };
  // not training: the plain attention
  CHECK(max_diff(run(seed, false).view(), reference(x.q, x.k, x.v, 1 / std::sqrt(3.0), no_bias)) < 1e-12);
  // training: the same seed draws the same mask, another seed another one
  CHECK(test::same_bits(run(seed, true), run(seed, true)));
  CHECK(max_diff(run(seed, true).view(), run(other, true)) > 1e-3);
  // the weights' dropout is loom::dropout: the graph equals one written with it by hand
  auto by_hand = make_graph(matmul(dropout<0.5>(nn::attention_weights(Q<2>{}, K<2>{}), seed_node), V<2>{}));
  auto hand = by_hand.executor<double>(none);
  hand.forward({{"q", x.q}, {"k", x.k}, {"v", x.v}, {"seed", seed}});
  CHECK(max_diff(hand.output(), run(seed, true)) == 0);
  test::require_gradcheck(g, none, {{"q", x.q}, {"k", x.k}, {"v", x.v}, {"seed", seed}});
}

namespace {
constexpr long D = 8;
using X = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>;
}  // namespace

TEST_CASE("multi-head attention without biases has no bias parameters and passes gradcheck") {
  auto g = make_graph(nn::self_attention<"a", 2, {.bias = false}>(X{}, nn::causal));
  auto p = g.make_params<double>(1);
  CHECK(p.names() == std::vector<std::string>{"a.in_proj_weight", "a.out_proj.weight"});
  test::randomize(p, 2);
  test::require_gradcheck(g, p, {{"x", test::random_tensor<double>({2, 3, D}, 3)}});
  auto c = make_graph(nn::cross_attention<"c", 2, {.bias = false}>(X{}, input<"m", shape<dyn<"B">, dyn<"S">, fix<D>>>()));
  CHECK(c.make_params<double>(1).names() == std::vector<std::string>{"c.in_proj_weight", "c.out_proj.weight"});
}

TEST_CASE("multi-head attention takes masks per sequence [B, T, S] and per key [B, S], bool or float") {
  auto per_seq = input<"m", shape<dyn<"B">, dyn<"T">, dyn<"T">>, bool>();
  auto per_key = input<"k", shape<dyn<"B">, dyn<"T">>, bool>();
  auto bias = input<"f", shape<dyn<"B">, dyn<"T">, dyn<"T">>>();
  auto g = make_graph(nn::self_attention<"a", 2>(X{}, nn::allowed(per_seq), nn::allowed(per_key), nn::additive(bias)));
  auto p = g.make_params<double>(1);
  test::randomize(p, 2);
  tensor<std::uint8_t> m(dims_t{2, 3, 3}), k({2, 3}, {1, 1, 0, 1, 0, 1});
  for (std::int64_t i = 0; i < m.size(); ++i) m[i] = static_cast<std::uint8_t>(i % 4 != 1);
  auto f = test::random_tensor<double>({2, 3, 3}, 5);
  for (int fuse : {0, 1})
    test::require_gradcheck(g, p, {{"x", test::random_tensor<double>({2, 3, D}, 3)}, {"m", m}, {"k", k}, {"f", f}},
                            {.fuse = fuse});
}

TEST_CASE("fused attention over several query blocks gives each row the bits of a run over its rows alone") {
  // With more query rows than one block (128), the blocked kernels copy each entry's keys and
  // values into the GEMM's panels once (the forward's values block by block of keys), for every
  // query block to read; with one block they multiply key block by key block. Row i's output and its query gradient
  // depend on its own query row, K, V and its own output gradient only, so a run over 300 rows
  // (three query blocks; two key blocks, 256 + 44) must give each row the bits of three runs of
  // 100 rows.
  auto q = input<"q", shape<dyn<"B">, fix<2>, dyn<"T">, fix<32>>>();
  auto k = input<"k", shape<dyn<"B">, fix<2>, dyn<"S">, fix<32>>>();
  auto v = input<"v", shape<dyn<"B">, fix<2>, dyn<"S">, fix<32>>>();
  auto g = make_graph(nn::attention<{}>(q, k, v));
  param_store<float> none;
  const std::int64_t T = 300, S = 300, part = 100;
  const auto qs = test::random_tensor<float>({1, 2, T, 32}, 41);
  const auto ks = test::random_tensor<float>({1, 2, S, 32}, 42);
  const auto vs = test::random_tensor<float>({1, 2, S, 32}, 43);
  const auto dout = test::random_tensor<float>({1, 2, T, 32}, 44);
  // rows [r0, r0 + rows) of both heads of x
  auto rows_of = [](const tensor<float>& x, std::int64_t r0, std::int64_t rows) {
    tensor<float> y(dims_t{1, 2, rows, x.dim(3)});
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t c = 0; c < x.dim(3); ++c) y.at({0, h, i, c}) = x.at({0, h, r0 + i, c});
    return y;
  };
  auto same_bits = [](const tensor<float>& a, const tensor<float>& b) {
    return a.dims() == b.dims() && std::memcmp(a.values().data(), b.values().data(), a.values().size_bytes()) == 0;
  };
  // the output and dq of a run over query rows [r0, r0 + rows)
  auto run = [&](std::int64_t r0, std::int64_t rows) {
    auto ex = g.executor<float>(none, {.threads = 2, .input_grads = true});
    ex.forward({{"q", rows_of(qs, r0, rows)}, {"k", ks}, {"v", vs}});
    const tensor<float> cot = rows_of(dout, r0, rows);
    ex.backward(std::span<const tensor<float>>(&cot, 1));
    return std::pair{tensor<float>(ex.output()), tensor<float>(ex.input_grad("q"))};
  };
  const auto [out, dq] = run(0, T);
  for (std::int64_t r0 = 0; r0 < T; r0 += part) {
    const auto [out_p, dq_p] = run(r0, part);
    INFO("rows from " << r0);
    CHECK(same_bits(rows_of(out, r0, part), out_p));
    CHECK(same_bits(rows_of(dq, r0, part), dq_p));
  }
}

TEMPLATE_TEST_CASE_SIG("float fused attention over several query blocks matches the double reference, causal or not",
                       "", ((long Dh), Dh), 64, 40) {
  // The blocked kernels read each entry's keys and values from panels packed once for all query
  // blocks; a causal span ends inside a block of values, whose first rows are then read panel
  // by panel. Heads of 64 have two 32-column panels; heads of 40 end in a panel of 8 columns,
  // which the packed path does not take (the product then goes through gemm). 300 rows: three
  // query blocks, key blocks of 256 and 44.
  auto q = input<"q", shape<dyn<"B">, fix<2>, dyn<"T">, fix<Dh>>>();
  auto k = input<"k", shape<dyn<"B">, fix<2>, dyn<"S">, fix<Dh>>>();
  auto v = input<"v", shape<dyn<"B">, fix<2>, dyn<"S">, fix<Dh>>>();
  const std::int64_t T = 300;
  const auto qs = test::random_tensor<float>({1, 2, T, Dh}, 51);
  const auto ks = test::random_tensor<float>({1, 2, T, Dh}, 52);
  const auto vs = test::random_tensor<float>({1, 2, T, Dh}, 53);
  auto wide = [](const tensor<float>& x) {
    tensor<double> y(x.dims());
    for (std::int64_t i = 0; i < x.size(); ++i) y.values()[static_cast<std::size_t>(i)] = x.values()[static_cast<std::size_t>(i)];
    return y;
  };
  param_store<float> none;
  // g's float output on (qin, ks, vs) against the double reference
  auto check = [&](const auto& g, const tensor<float>& qin, const auto& bias) {
    const auto want = reference(wide(qin), wide(ks), wide(vs), 1 / std::sqrt(static_cast<double>(Dh)), bias);
    auto ex = g.template executor<float>(none, {.threads = 2});
    ex.forward({{"q", qin}, {"k", ks}, {"v", vs}});
    const auto out = ex.output();
    REQUIRE(out.dims == want.dims());
    double worst = 0;
    for (std::int64_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(out[i] - want.values()[static_cast<std::size_t>(i)]));
    CHECK(worst < 2e-5);
  };
  SECTION("every key") { check(make_graph(nn::attention<{}>(q, k, v)), qs, no_bias); }
  auto causal = [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) { return j > i ? -inf : 0.0; };
  SECTION("causal") { check(make_graph(nn::attention<{.is_causal = true}>(q, k, v)), qs, causal); }
  SECTION("grouped heads, causal: query heads 0 and 1 read one copy of key/value head 0, 2 and 3 of head 1") {
    auto q4 = input<"q", shape<dyn<"B">, fix<4>, dyn<"T">, fix<Dh>>>();
    check(make_graph(nn::attention<{.is_causal = true, .enable_gqa = true}>(q4, k, v)),
          test::random_tensor<float>({1, 4, T, Dh}, 54), causal);
  }
}
