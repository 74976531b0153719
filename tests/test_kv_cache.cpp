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

  nn::kv_cache<T> cache({"layers.0.self_attn", "layers.1.self_attn"}, batch, H, D / H, total);
  auto run = step.template executor<T>(params, {.inference = inference});
  double worst = 0;
  std::int64_t t0 = 0;
  for (auto n : chunks) {
    auto feeds = cache.feeds(n);
    auto xs = rows(x, t0, n);
    feeds.emplace_back("x", xs);
    run.forward(feeds);
    worst = std::max(worst, rel_error<T>(run.output(), 0, want, t0, n));
    cache.append(run, n);
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

TEST_CASE("decoding past the capacity throws capacity_error and keeps the cache") {
  nn::kv_cache<float> cache({"a"}, 1, 2, 4, 3);
  CHECK_NOTHROW(cache.feeds(3));
  CHECK_THROWS_AS(cache.feeds(4), capacity_error);
  CHECK(cache.length() == 0);
  CHECK(cache.bytes() == 2 * 1 * 2 * 3 * 4 * sizeof(float));
  CHECK_THROWS_AS(cache.truncate(1), value_error);
}

TEST_CASE("a cache reset for a new prompt gives the same result as a fresh one") {
  auto step = make_graph(two_layers<2, true>());
  auto params = step.make_params<double>(1);
  test::randomize(params, 2);
  auto run = step.executor<double>(params, {.inference = true});
  auto first = test::random_tensor<double>({1, 4, D}, 7);
  auto second = test::random_tensor<double>({1, 3, D}, 8);
  auto decode = [&](nn::kv_cache<double>& cache, const tensor<double>& prompt) {
    auto feeds = cache.feeds(prompt.dim(1));
    feeds.emplace_back("x", prompt);
    run.forward(feeds);
    cache.append(run, prompt.dim(1));
    return tensor<double>(run.output());
  };
  nn::kv_cache<double> reused({"layers.0.self_attn", "layers.1.self_attn"}, 1, 2, D / 2, 16);
  decode(reused, first);
  reused.reset();
  auto again = decode(reused, second);
  nn::kv_cache<double> fresh({"layers.0.self_attn", "layers.1.self_attn"}, 1, 2, D / 2, 16);
  auto expect = decode(fresh, second);
  REQUIRE(again.size() == expect.size());
  for (std::int64_t i = 0; i < again.size(); ++i) CHECK(again[i] == expect[i]);
}

TEST_CASE("truncating the cache rewinds decoding to an earlier position") {
  auto step = make_graph(two_layers<2, true>());
  auto params = step.make_params<double>(1);
  test::randomize(params, 2);
  auto run = step.executor<double>(params, {.inference = true});
  nn::kv_cache<double> cache({"layers.0.self_attn", "layers.1.self_attn"}, 1, 2, D / 2, 16);
  auto x = test::random_tensor<double>({1, 5, D}, 9);
  auto step_rows = [&](std::int64_t t0, std::int64_t n) {
    auto feeds = cache.feeds(n);
    auto xs = rows(x, t0, n);
    feeds.emplace_back("x", xs);
    run.forward(feeds);
    cache.append(run, n);
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
