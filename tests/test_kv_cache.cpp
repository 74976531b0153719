// KV-cached decoding runs the same attention functions as training: prefill + one-token
// steps (or chunks) must reproduce the full causal forward at every position.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "loom/nn/kv_cache.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

constexpr long D = 8;
using X = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>;

// Two residual self-attention layers; the same function serves training and decoding.
template <fixed_string Name, int H, bool Cached, class In>
auto residual_attention(In x) {
  if constexpr (Cached) return add(nn::self_attention_cached<Name, H>(x, nn::causal), x);
  else return add(nn::self_attention<Name, H>(x, nn::causal), x);
}
template <int H, bool Cached>
auto two_layers() {
  return residual_attention<"layers.1.self_attn", H, Cached>(residual_attention<"layers.0.self_attn", H, Cached>(X{}));
}

// max |a − b| / max |b| over the rows [t0, t1) of [B, T, D] tensors
template <class T>
double rel_error(tensor_view<const T> got, std::int64_t got_t0, const tensor<T>& want, std::int64_t t0, std::int64_t n) {
  const std::int64_t B = want.dim(0), Tw = want.dim(1), Tg = got.dims[1];
  double diff = 0, scale = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t d = 0; d < D; ++d) {
        const double w = want[(b * Tw + t0 + t) * D + d];
        const double g = got[(b * Tg + got_t0 + t) * D + d];
        diff = std::max(diff, std::abs(w - g));
        scale = std::max(scale, std::abs(w));
      }
  return diff / scale;
}

// x[:, t0 : t0 + n, :]
template <class T>
tensor<T> rows(const tensor<T>& x, std::int64_t t0, std::int64_t n) {
  const std::int64_t B = x.dim(0), Tx = x.dim(1);
  tensor<T> r(dims_t{B, n, D});
  for (std::int64_t b = 0; b < B; ++b)
    std::copy(x.data() + (b * Tx + t0) * D, x.data() + (b * Tx + t0 + n) * D, r.data() + b * n * D);
  return r;
}

// Runs the full causal forward, then the cached graph over `chunks` (sizes summing to T),
// and returns the worst relative error over all positions.
template <class T, int H>
double cached_vs_full(std::int64_t batch, std::vector<std::int64_t> chunks, bool inference) {
  std::int64_t total = 0;
  for (auto c : chunks) total += c;
  auto full = make_graph(two_layers<H, false>());
  auto step = make_graph(two_layers<H, true>());
  auto params = full.template make_params<T>(1);
  test::randomize(params, 2);
  auto x = test::random_tensor<T>({batch, total, D}, 3);

  auto run_full = full.template executor<T>(params);
  run_full.forward({{"x", x}});
  tensor<T> want(run_full.output());

  nn::kv_cache<T> cache(step, batch, total);
  auto run = step.template executor<T>(params, {.inference = inference});
  double worst = 0;
  std::int64_t t0 = 0;
  for (auto n : chunks) {
    auto xs = rows(x, t0, n);
    CHECK(nn::decode_step(run, cache, {{"x", xs}}) == n);
    worst = std::max(worst, rel_error<T>(run.output(), 0, want, t0, n));
    t0 += n;
  }
  return worst;
}

}  // namespace

TEMPLATE_TEST_CASE_SIG("prefill and one-token decode equal the full causal forward at every position", "",
                       ((int H), H), 1, 2, 4) {
  SECTION("double, batch 1") { CHECK(cached_vs_full<double, H>(1, {3, 1, 1, 1, 1}, false) <= 1e-12); }
  SECTION("double, batch 3") { CHECK(cached_vs_full<double, H>(3, {2, 1, 1, 1}, true) <= 1e-12); }
  SECTION("float, batch 2") { CHECK(cached_vs_full<float, H>(2, {4, 1, 1, 1}, true) <= 1e-5); }
}

TEST_CASE("a prefill split into chunks gives the same outputs as one pass") {
  CHECK(cached_vs_full<double, 2>(2, {2, 3, 1, 2}, true) <= 1e-12);
  CHECK(cached_vs_full<float, 2>(2, {1, 1, 3, 2}, true) <= 1e-5);
}

TEST_CASE("decoding past the capacity throws capacity_error before running and keeps the cache") {
  auto step = make_graph(two_layers<2, true>());
  auto params = step.make_params<float>(1);
  auto run = step.executor<float>(params, {.inference = true});
  nn::kv_cache<float> cache(step, 1, 3);
  // two layers, keys and values each: 4 blocks of [B 1, H 2, capacity 3, d_k 4]
  CHECK(cache.bytes() == 4 * 1 * 2 * 3 * 4 * sizeof(float));
  CHECK(cache.names() == std::vector<std::string>{"layers.0.self_attn.cache_k", "layers.0.self_attn.cache_v",
                                                  "layers.1.self_attn.cache_k", "layers.1.self_attn.cache_v"});
  auto x2 = test::random_tensor<float>({1, 2, D}, 3);
  CHECK(nn::decode_step(run, cache, {{"x", x2}}) == 2);
  const tensor<float> keys = cache.state("layers.1.self_attn.cache_k");
  const std::string message = test::message_of([&] { nn::decode_step(run, cache, {{"x", x2}}); });
  CHECK(message.find("room for 3 rows") != std::string::npos);
  CHECK_THROWS_AS(nn::decode_step(run, cache, {{"x", x2}}), capacity_error);
  CHECK(cache.length() == 2);
  CHECK(test::same_bits(cache.state("layers.1.self_attn.cache_k"), keys));
  CHECK_THROWS_AS(cache.truncate(3), value_error);
  CHECK_THROWS_AS(cache.state("layers.9.self_attn.cache_k"), missing_error);
}

TEST_CASE("a cache needs a graph with states") {
  auto plain = make_graph(two_layers<2, false>());
  CHECK_THROWS_AS(nn::kv_cache<float>(plain, 1, 4), value_error);
  auto step = make_graph(two_layers<2, true>());
  CHECK_THROWS_AS(nn::kv_cache<float>(step, 0, 4), value_error);
  CHECK_THROWS_AS(nn::kv_cache<float>(step, 1, 0), value_error);
}

TEST_CASE("a decoding step writes the new keys into the cache's storage: no copy of the cache") {
  auto step = make_graph(two_layers<2, true>());
  auto params = step.make_params<double>(1);
  test::randomize(params, 2);
  auto run = step.executor<double>(params, {.inference = true});
  nn::kv_cache<double> cache(step, 2, 8);
  auto x = test::random_tensor<double>({2, 3, D}, 4);
  nn::decode_step(run, cache, {{"x", x}});
  // the step's keys are the cache's storage itself: a view of its blocks, spaced by the capacity
  auto keys = run.output_storage("layers.0.self_attn.cache_k");
  CHECK(keys.mat_stride == 8 * (D / 2));
  CHECK(keys.dims == dims_t{2, 2, 3, D / 2});
  CHECK_THROWS_AS(run.output("layers.0.self_attn.cache_k"), error);  // not contiguous: output_storage()
  // and they are what the graph computes without a cache: x's projection, heads split
  auto plain = make_graph(two_layers<2, false>());
  auto full = plain.executor<double>(params);
  auto k_node = std::get<1>(nn::detail::self_qkv<"layers.0.self_attn">(X{}));
  full.keep(nn::detail::split_heads<2>(k_node));
  full.forward({{"x", x}});
  auto want = full.value(nn::detail::split_heads<2>(k_node));  // [2, 2, 3, 4]
  const auto got = cache.state("layers.0.self_attn.cache_k");
  REQUIRE(got.dims() == want.dims);
  for (std::int64_t i = 0; i < got.size(); ++i) CHECK(got[i] == want[i]);
}

TEST_CASE("a cache fed contiguously is copied into instead: the same results") {
  // the same step, with the cache inputs fed as plain tensors (no room): the concat copies
  // and kv_cache::append copies the new rows out of the outputs
  auto step = make_graph(two_layers<2, true>());
  auto params = step.make_params<double>(1);
  test::randomize(params, 2);
  auto run = step.executor<double>(params, {.inference = true});
  nn::kv_cache<double> in_place(step, 1, 8), copied(step, 1, 8);
  auto x = test::random_tensor<double>({1, 5, D}, 6);
  for (std::int64_t t = 0; t < 5; ++t) {
    auto xs = rows(x, t, 1);
    nn::decode_step(run, in_place, {{"x", xs}});
    const tensor<double> want(run.output());
    std::vector<tensor<double>> states;
    std::vector<feed> feeds;
    for (const auto& name : copied.names()) states.push_back(copied.state(name));
    for (std::size_t k = 0; k < states.size(); ++k) feeds.emplace_back(copied.names()[k], states[k]);
    feeds.emplace_back("x", xs);
    run.forward(feeds);
    CHECK(run.output_storage("layers.1.self_attn.cache_v").mat_stride == (t + 1) * (D / 2));
    CHECK(test::same_bits(tensor<double>(run.output()), want));
    CHECK(copied.append(run) == 1);
  }
  for (const auto& name : copied.names()) CHECK(test::same_bits(copied.state(name), in_place.state(name)));
}

TEST_CASE("a cache reset for a new prompt gives the same result as a fresh one") {
  auto step = make_graph(two_layers<2, true>());
  auto params = step.make_params<double>(1);
  test::randomize(params, 2);
  auto run = step.executor<double>(params, {.inference = true});
  auto first = test::random_tensor<double>({1, 4, D}, 7);
  auto second = test::random_tensor<double>({1, 3, D}, 8);
  auto decode = [&](nn::kv_cache<double>& cache, const tensor<double>& prompt) {
    nn::decode_step(run, cache, {{"x", prompt}});
    return tensor<double>(run.output());
  };
  nn::kv_cache<double> reused(step, 1, 16);
  decode(reused, first);
  reused.reset();
  auto again = decode(reused, second);
  nn::kv_cache<double> fresh(step, 1, 16);
  auto expect = decode(fresh, second);
  REQUIRE(again.size() == expect.size());
  for (std::int64_t i = 0; i < again.size(); ++i) CHECK(again[i] == expect[i]);
}

TEST_CASE("truncating the cache rewinds decoding to an earlier position") {
  auto step = make_graph(two_layers<2, true>());
  auto params = step.make_params<double>(1);
  test::randomize(params, 2);
  auto run = step.executor<double>(params, {.inference = true});
  nn::kv_cache<double> cache(step, 1, 16);
  auto x = test::random_tensor<double>({1, 5, D}, 9);
  auto step_rows = [&](std::int64_t t0, std::int64_t n) {
    auto xs = rows(x, t0, n);
    nn::decode_step(run, cache, {{"x", xs}});
    return tensor<double>(run.output());
  };
  step_rows(0, 3);
  auto last = step_rows(3, 2);
  cache.truncate(3);
  CHECK(cache.length() == 3);
  auto redo = step_rows(3, 2);
  for (std::int64_t i = 0; i < last.size(); ++i) CHECK(redo[i] == last[i]);
}

TEST_CASE("the decoding path passes gradcheck: cached self-attention with a non-empty cache") {
  auto g = make_graph(nn::self_attention_cached<"a", 2>(X{}, nn::causal));
  auto p = g.make_params<double>(3);
  test::randomize(p, 4);
  auto xs = test::random_tensor<double>({2, 2, D}, 5);
  auto ck = test::random_tensor<double>({2, 2, 3, D / 2}, 6);
  auto cv = test::random_tensor<double>({2, 2, 3, D / 2}, 7);
  test::require_gradcheck(g, p, {{"x", xs}, {"a.cache_k", ck}, {"a.cache_v", cv}});
}

TEST_CASE("bad uses of the cache and of feeds with room say what is wrong and change nothing") {
  SECTION("a feed with less room than rows") {
    tensor<float> storage(dims_t{1, 2, 4, 3});
    CHECK_THROWS_AS(feed::with_room("k", storage.data(), dims_t{1, 2, 5, 3}, 4), shape_error);
    CHECK_THROWS_AS(feed::with_room("k", storage.data(), dims_t{3}, 4), shape_error);
  }
  SECTION("a state that is not [B, H, P, d_k]") {
    auto old = input<"s", shape<dyn<"B">, dyn<"P">, fix<4>>>();
    auto rows = input<"x", shape<dyn<"B">, dyn<"T">, fix<4>>>();
    auto g = make_graph(named<"s">(concat<1>(old, rows)));
    const std::string message = test::message_of([&] { nn::kv_cache<float>(g, 1, 8); });
    CHECK_THAT(message, Catch::Contains("\"s\"") && Catch::Contains("[B, H, P, d_k]"));
  }
  SECTION("append after a step the cache did not feed") {
    auto step = make_graph(two_layers<2, true>());
    auto params = step.make_params<double>(1);
    auto run = step.executor<double>(params, {.inference = true});
    nn::kv_cache<double> cache(step, 1, 8), other(step, 1, 8);
    auto x = test::random_tensor<double>({1, 2, D}, 5);
    nn::decode_step(run, other, {{"x", x}});
    nn::decode_step(run, other, {{"x", x}});  // the outputs now hold 4 positions
    nn::decode_step(run, cache, {{"x", x}});
    const tensor<double> before = cache.state("layers.0.self_attn.cache_v");
    auto x1 = test::random_tensor<double>({1, 1, D}, 6);
    nn::decode_step(run, other, {{"x", x1}});  // 5 positions, not this cache's 2 + n
    CHECK_THROWS_AS(cache.append(run), shape_error);
    CHECK(cache.length() == 2);
    CHECK(test::same_bits(cache.state("layers.0.self_attn.cache_v"), before));
    // a cache of the same length but other positions: caught by the positions themselves
    nn::kv_cache<double> twin(step, 1, 8);
    auto y = test::random_tensor<double>({1, 2, D}, 7);
    nn::decode_step(run, twin, {{"x", y}});
    nn::decode_step(run, twin, {{"x", x1}});
    CHECK_THAT(test::message_of([&] { cache.append(run); }), Catch::Contains("does not begin with this cache's"));
    CHECK(cache.length() == 2);
  }
}

namespace {
// A grouped-query block a user writes from the public pieces: 4 query heads share 2 key/value
// heads of size 2 (k and v project D = 8 to 4), causal, and its decoding state made with
// nn::kv_state. The same function builds the training graph (Cached = false) and the step.
template <bool Cached>
auto user_gqa_block() {
  constexpr long H = 4, Hkv = 2, Dh = 2;
  auto wq = param<"gqa.q.weight", shape<fix<H * Dh>, fix<D>>>();
  auto wk = param<"gqa.k.weight", shape<fix<Hkv * Dh>, fix<D>>>();
  auto wv = param<"gqa.v.weight", shape<fix<Hkv * Dh>, fix<D>>>();
  auto heads = []<long N>(auto y) {  // [B, T, N·Dh] -> [B, N, T, Dh]
    return transpose<0, 2, 1, 3>(reshape<shape<dyn<"B">, dyn<"T">, fix<N>, fix<Dh>>>(y));
  };
  auto q = heads.template operator()<H>(matmul<false, true>(X{}, wq));
  auto k = heads.template operator()<Hkv>(matmul<false, true>(X{}, wk));
  auto v = heads.template operator()<Hkv>(matmul<false, true>(X{}, wv));
  auto attend = [&](auto keys, auto values) {
    auto o = nn::attention<nn::attention_options{.enable_gqa = true}>(q, keys, values, nn::causal);  // [B, H, T, Dh]
    return reshape<shape<dyn<"B">, dyn<"T">, fix<H * Dh>>>(transpose<0, 2, 1, 3>(o));
  };
  if constexpr (Cached) return attend(nn::kv_state<"gqa.cache_k">(k), nn::kv_state<"gqa.cache_v">(v));
  else return attend(k, v);
}
}  // namespace

TEST_CASE("a user-built grouped-query block decodes through kv_state and the cache as its full forward") {
  auto full = make_graph(user_gqa_block<false>());
  auto step = make_graph(user_gqa_block<true>());
  auto params = full.make_params<double>(1);
  test::randomize(params, 4);
  const std::int64_t B = 2, T = 6;
  auto x = test::random_tensor<double>({B, T, D}, 5);
  auto run_full = full.executor<double>(params);
  run_full.forward({{"x", x}});
  const tensor<double> want(run_full.output());

  nn::kv_cache<double> cache(step, B, T);
  REQUIRE(cache.names() == std::vector<std::string>{"gqa.cache_k", "gqa.cache_v"});
  auto run = step.executor<double>(params, {.inference = true});
  std::int64_t t0 = 0;
  for (std::int64_t n : {3, 1, 1, 1}) {
    CHECK(nn::decode_step(run, cache, {{"x", rows(x, t0, n)}}) == n);
    CHECK(rel_error<double>(run.output(), 0, want, t0, n) <= 1e-12);
    t0 += n;
  }
  // The cache holds the 2 key/value heads, not 4: [B, Hkv, T, Dh].
  const auto keys = cache.state("gqa.cache_k");
  CHECK(keys.dims() == dims_t{B, 2, T, 2});
}
