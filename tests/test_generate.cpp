// Generation through the KV cache: greedy decoding equals recomputing the whole prefix with
// the full model; sampling is reproducible and follows softmax(logits / temperature).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "loom/loom.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/transformer.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {
constexpr nn::transformer_config lm{.d_model = 16, .heads = 2, .ffn = 32, .decoder_layers = 2, .tgt_vocab = 13};
using full_model = nn::language_model<lm, nn::eval_mode>;
using step_model = nn::language_model<lm, nn::decode_mode>;

// Greedy continuation by running the full model over the whole prefix at every step.
std::vector<int> greedy_by_recomputing(executor<double>& full, std::vector<int> seq, int n) {
  std::vector<int> out;
  for (int s = 0; s < n; ++s) {
    tensor<std::int32_t> toks(dims_t{1, static_cast<std::int64_t>(seq.size())});
    for (std::size_t i = 0; i < seq.size(); ++i) toks[static_cast<std::int64_t>(i)] = seq[i];
    full.forward({{"tokens", toks}});
    auto logits = full.output();
    const std::int64_t v = logits.dims[-1];
    std::span<const double> last(logits.data + (static_cast<std::int64_t>(seq.size()) - 1) * v,
                                 static_cast<std::size_t>(v));
    int t = nn::pick_token<double>(last, 0.0, 0, 0.0);
    out.push_back(t);
    seq.push_back(t);
  }
  return out;
}
}  // namespace

TEST_CASE("greedy generation through the cache equals recomputing the prefix, for prompts of mixed lengths") {
  auto full = make_graph(full_model::logits());
  auto step = make_graph(step_model::logits());
  auto params = full.make_params<double>(11);
  auto run_full = full.executor<double>(params);
  auto run_step = step.executor<double>(params, {.inference = true});
  std::vector<std::vector<int>> prompts{{1, 2, 3, 4, 5}, {7}, {3, 9, 1}};
  nn::kv_cache<double> cache(step, 3, 32);
  std::vector<std::pair<std::size_t, int>> streamed;
  auto r = nn::generate(run_step, cache, prompts, {.max_new_tokens = 8}, {},
                        [&](std::size_t b, int t) { streamed.emplace_back(b, t); });
  CHECK(r.steps == 7);
  CHECK(streamed.size() == 24);
  for (std::size_t b = 0; b < prompts.size(); ++b) CHECK(r.tokens[b] == greedy_by_recomputing(run_full, prompts[b], 8));
}

TEST_CASE("sampling is reproducible for a seed, and top-k = 1 is greedy") {
  auto step = make_graph(step_model::logits());
  auto params = step.make_params<float>(3);
  auto run = step.executor<float>(params, {.inference = true});
  nn::kv_cache<float> cache(step, 1, 40);
  std::vector<std::vector<int>> prompt{{1, 2}};
  auto a = nn::generate(run, cache, prompt, {.max_new_tokens = 20, .temperature = 1.0, .seed = 5});
  auto b = nn::generate(run, cache, prompt, {.max_new_tokens = 20, .temperature = 1.0, .seed = 5});
  auto c = nn::generate(run, cache, prompt, {.max_new_tokens = 20, .temperature = 1.0, .seed = 6});
  CHECK(a.tokens == b.tokens);
  CHECK(a.tokens != c.tokens);
  auto greedy = nn::generate(run, cache, prompt, {.max_new_tokens = 20});
  auto top1 = nn::generate(run, cache, prompt, {.max_new_tokens = 20, .temperature = 0.7, .top_k = 1, .seed = 9});
  CHECK(greedy.tokens == top1.tokens);
}

TEST_CASE("a sequence stops at its end token while the others go on") {
  auto step = make_graph(step_model::logits());
  auto params = step.make_params<float>(3);
  auto run = step.executor<float>(params, {.inference = true});
  nn::kv_cache<float> cache(step, 2, 40);
  std::vector<std::vector<int>> prompts{{1, 2}, {3}};
  auto free_run = nn::generate(run, cache, prompts, {.max_new_tokens = 10});
  const int eos = free_run.tokens[0][2];  // make sequence 0's third token the end token
  auto r = nn::generate(run, cache, prompts, {.max_new_tokens = 10, .eos = eos});
  REQUIRE(r.tokens[0].size() <= 3);
  CHECK(r.tokens[0].back() == eos);
}

TEST_CASE("pick_token samples from softmax(logits / temperature), restricted to the top k") {
  std::vector<double> logits{0.0, std::log(2.0), std::log(3.0), -50.0};  // probabilities 1/6, 2/6, 3/6, ~0
  rng gen(1);
  std::vector<int> counts(4, 0);
  const int n = 60000;
  for (int i = 0; i < n; ++i) ++counts[static_cast<std::size_t>(nn::pick_token<double>(logits, 1.0, 0, gen.uniform()))];
  CHECK(std::abs(counts[0] / double(n) - 1.0 / 6) < 0.01);
  CHECK(std::abs(counts[1] / double(n) - 2.0 / 6) < 0.01);
  CHECK(std::abs(counts[2] / double(n) - 3.0 / 6) < 0.01);
  std::fill(counts.begin(), counts.end(), 0);
  for (int i = 0; i < n; ++i) ++counts[static_cast<std::size_t>(nn::pick_token<double>(logits, 1.0, 2, gen.uniform()))];
  CHECK(counts[0] == 0);  // outside the top 2
  CHECK(std::abs(counts[2] / double(n) - 0.6) < 0.01);
  CHECK(nn::pick_token<double>(logits, 0.0, 0, 0.99) == 2);
}

// Greedy pick_token finds the first largest logit itself (vector lanes, then a search); it must
// return what std::max_element returns for every length, tie, signed zero and −inf (NaN and
// +inf are refused: nn::check_logits).
template <class T>
void greedy_matches_max_element() {
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  const std::vector<T> specials{-inf, T(0), -T(0), T(1), T(-1), T(2)};
  std::mt19937 gen(7);
  for (std::size_t n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1000})
    for (int trial = 0; trial < 60; ++trial) {
      // few distinct values, so that ties are common
      std::vector<T> x(n);
      for (auto& v : x) v = static_cast<T>(static_cast<int>(gen() % 7) - 3);
      const int extra = trial % 6;  // 0 to 5 special values at random places
      for (int e = 0; e < extra; ++e) x[gen() % n] = specials[gen() % specials.size()];
      if (trial % 10 == 9) x[0] = -inf;
      const auto want = static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin());
      INFO("n " << n << " trial " << trial);
      if (x[static_cast<std::size_t>(want)] == -inf)  // every logit −inf: no token can be chosen
        CHECK_THROWS_AS(nn::pick_token<T>(x, 0.0, 0, 0.0), value_error);
      else
        CHECK(nn::pick_token<T>(x, 0.0, 0, 0.0) == want);
      x[gen() % n] = trial % 2 ? nan : inf;  // one NaN or +inf anywhere: refused
      CHECK_THROWS_AS(nn::pick_token<T>(x, 0.0, 0, 0.0), value_error);
    }
}

TEST_CASE("greedy pick_token returns the index std::max_element does: first of the largest, NaN and +inf refused") {
  greedy_matches_max_element<float>();
  greedy_matches_max_element<double>();
  const std::vector<float> zeros{-0.f, 0.f, -1.f};
  CHECK(nn::pick_token<float>(zeros, 0.0, 0, 0.0) == 0);  // −0 and +0 are equal: the first
  const std::vector<float> all_nan(40, std::numeric_limits<float>::quiet_NaN());
  CHECK_THROWS_AS(nn::pick_token<float>(all_nan, 0.0, 0, 0.0), value_error);
}

TEST_CASE("generation that would exceed the cache throws capacity_error before running") {
  auto step = make_graph(step_model::logits());
  auto params = step.make_params<float>(3);
  auto run = step.executor<float>(params, {.inference = true});
  nn::kv_cache<float> cache(step, 1, 10);
  std::vector<std::vector<int>> prompt{{1, 2, 3}};
  CHECK_THROWS_AS(nn::generate(run, cache, prompt, {.max_new_tokens = 8}), capacity_error);
  CHECK_NOTHROW(nn::generate(run, cache, prompt, {.max_new_tokens = 7}));
  std::vector<std::vector<int>> empty{{}};
  CHECK_THROWS_AS(nn::generate(run, cache, empty, {.max_new_tokens = 2}), value_error);
}
