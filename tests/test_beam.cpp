// Beam search through the KV cache: width 1 is greedy decoding; every hypothesis' score is the
// model's own log-probability of it (recomputed by the full forward, so the cache rows followed
// their hypotheses); a beam as wide as the search space finds the exhaustive search's best;
// on a trained translation model, beam 4 scores at least as well as greedy on every test
// sentence; the cache's reorder gathers rows by origin.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include "loom/nn/beam_search.hpp"
#include "loom/train/trainer.hpp"
#include "test_support.hpp"
#include "translation.hpp"

using namespace loom;

namespace {

constexpr nn::transformer_config tiny{.d_model = 16, .heads = 2, .ffn = 24, .encoder_layers = 1, .decoder_layers = 2,
                                      .src_vocab = 9, .tgt_vocab = 6};
using eval_model = nn::seq2seq<tiny, nn::eval_mode>;
using decode_model = nn::seq2seq<tiny, nn::decode_mode>;
constexpr int bos = 1, eos = 2;

tensor<std::int32_t> ints(dims_t d, std::vector<std::int32_t> v) { return tensor<std::int32_t>(d, std::move(v)); }

/// The model's log-probability of `tokens` after <bos> for source `src` (one sequence), by the
/// full forward with teacher forcing: Σ_t log softmax(logits[t])[tokens[t]].
template <class Full>
double log_prob_of(Full& full, const std::vector<std::int32_t>& src, const std::vector<int>& tokens) {
  if (tokens.empty()) return 0;
  std::vector<std::int32_t> tgt{bos};
  tgt.insert(tgt.end(), tokens.begin(), tokens.end() - 1);
  full.forward({{"src", ints({1, static_cast<std::int64_t>(src.size())}, src)},
                {"src_len", ints({1}, {static_cast<std::int32_t>(src.size())})},
                {"tgt", ints({1, static_cast<std::int64_t>(tgt.size())}, tgt)}});
  auto logits = full.output();
  const std::int64_t v = logits.dims[-1];
  double total = 0;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const double* row = logits.data + static_cast<std::int64_t>(t) * v;
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (std::int64_t j = 0; j < v; ++j) mx = std::max(mx, row[j]);
    for (std::int64_t j = 0; j < v; ++j) sum += std::exp(row[j] - mx);
    total += row[tokens[t]] - mx - std::log(sum);
  }
  return total;
}

/// Everything a decoding of the tiny model needs, in double.
struct tiny_setup {
  decltype(make_graph(eval_model::logits())) full_graph;
  decltype(std::apply([](auto... m) { return make_graph(m...); }, eval_model::cross_memory())) memory_graph;
  decltype(make_graph(decode_model::logits())) step_graph;
  param_store<double> params = full_graph.make_params<double>(5);
  std::vector<std::vector<std::int32_t>> sources{{1, 2, 3, 4}, {5, 6, 7, 8}, {8, 7, 1, 3}, {4, 4, 2, 6}};

  tiny_setup() { test::randomize(params, 6); }
  /// The sources as a batch: src [N, S], src_len [N] and the projected memory, by name.
  std::vector<feed> encode(executor<double>& memory) const {
    const auto n = static_cast<std::int64_t>(sources.size());
    tensor<std::int32_t> src(dims_t{n, 4}), len(dims_t{n});
    for (std::int64_t b = 0; b < n; ++b) {
      len[b] = 4;
      for (std::int64_t j = 0; j < 4; ++j) src[b * 4 + j] = sources[static_cast<std::size_t>(b)][static_cast<std::size_t>(j)];
    }
    memory.forward({{"src", src}, {"src_len", len}});
    std::vector<feed> extra = memory.named_feeds();
    extra.emplace_back("src_len", std::move(len));
    return extra;
  }
  nn::beam_result search(int k, int max_new, double alpha) {
    auto memory = memory_graph.executor<double>(params, {.inference = true});
    auto step = step_graph.executor<double>(params, {.inference = true});
    const auto extra = encode(memory);
    nn::kv_cache<double> cache(step, static_cast<std::int64_t>(sources.size()) * k, 1 + max_new);
    std::vector<std::vector<int>> prompts(sources.size(), std::vector<int>{bos});
    return nn::beam_search(step, cache, prompts,
                           {.beam = k, .max_new_tokens = max_new, .length_penalty = alpha, .eos = eos,
                            .tokens_input = "tgt", .first_input = ""},
                           extra);
  }
};

}  // namespace

TEST_CASE("kv_cache::reorder gathers the cached rows of each sequence by origin") {
  auto step = make_graph(decode_model::logits());
  nn::kv_cache<double> cache(step, 3, 4);
  // fill the cache by hand through its feeds: sequence b, head h, row t holds 100 b + 10 h + t
  auto feeds = cache.feeds();
  REQUIRE_FALSE(feeds.empty());
  param_store<double> params = make_graph(eval_model::logits()).make_params<double>(1);
  auto run = step.executor<double>(params, {.inference = true});
  auto memory = std::apply([](auto... m) { return make_graph(m...); }, eval_model::cross_memory()).executor<double>(params, {.inference = true});
  memory.forward({{"src", ints({3, 2}, {1, 2, 3, 4, 5, 6})}, {"src_len", ints({3}, {2, 2, 2})}});
  std::vector<feed> extra = memory.named_feeds();
  extra.emplace_back("src_len", ints({3}, {2, 2, 2}));
  extra.emplace_back("tgt", ints({3, 2}, {1, 3, 1, 4, 1, 5}));
  extra.emplace_back("positions", ints({3, 2}, {0, 1, 0, 1, 0, 1}));
  nn::decode_step(run, cache, extra);
  const auto name = cache.names()[0];
  const tensor<double> before = cache.state(name);  // [3, H, 2, d]
  const std::vector<std::int64_t> from{2, 0, 2};
  cache.reorder(from);
  const tensor<double> after = cache.state(name);
  const std::int64_t per_seq = before.size() / 3;
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t e = 0; e < per_seq; ++e) CHECK(after[b * per_seq + e] == before[from[static_cast<std::size_t>(b)] * per_seq + e]);
  CHECK_THROWS_AS(cache.reorder(std::vector<std::int64_t>{0, 1}), value_error);
  CHECK_THROWS_AS(cache.reorder(std::vector<std::int64_t>{0, 1, 3}), value_error);
}

TEST_CASE("beam search of width 1 is greedy decoding") {
  tiny_setup s;
  auto memory = s.memory_graph.executor<double>(s.params, {.inference = true});
  auto step = s.step_graph.executor<double>(s.params, {.inference = true});
  const auto extra = s.encode(memory);
  nn::kv_cache<double> cache(step, 4, 8);
  std::vector<std::vector<int>> prompts(4, std::vector<int>{bos});
  auto greedy = nn::generate(step, cache, prompts,
                             {.max_new_tokens = 7, .eos = eos, .tokens_input = "tgt", .first_input = ""}, extra);
  for (double alpha : {0.0, 1.0}) {
    auto beam = s.search(1, 7, alpha);
    for (std::size_t p = 0; p < 4; ++p) {
      REQUIRE(beam.hypotheses[p].size() == 1);
      CHECK(beam.hypotheses[p][0].tokens == greedy.tokens[p]);
    }
  }
}

TEST_CASE("every hypothesis' log-probability is the full model's: the cache rows followed their hypotheses") {
  tiny_setup s;
  auto full = s.full_graph.executor<double>(s.params, {.inference = true});
  for (int k : {2, 3, 5}) {
    auto r = s.search(k, 6, 0.7);
    for (std::size_t p = 0; p < s.sources.size(); ++p) {
      REQUIRE(static_cast<int>(r.hypotheses[p].size()) == k);
      for (std::size_t h = 0; h < r.hypotheses[p].size(); ++h) {
        const auto& hyp = r.hypotheses[p][h];
        INFO("k " << k << ", source " << p << ", hypothesis " << h);
        CHECK(std::abs(hyp.log_prob - log_prob_of(full, s.sources[p], hyp.tokens)) < 1e-10);
        CHECK(hyp.score == Approx(hyp.log_prob / std::pow(static_cast<double>(hyp.tokens.size()), 0.7)));
        CHECK(hyp.finished == (!hyp.tokens.empty() && hyp.tokens.back() == eos));
        if (h > 0) CHECK(hyp.score <= r.hypotheses[p][h - 1].score);
      }
    }
  }
}

TEST_CASE("a beam as wide as the search space finds the exhaustive search's best hypothesis") {
  // vocabulary 6, at most 3 new tokens: 6 + 36 + 216 sequences; a beam of 216 keeps them all
  tiny_setup s;
  auto full = s.full_graph.executor<double>(s.params, {.inference = true});
  for (double alpha : {0.0, 1.0}) {
    INFO("length penalty " << alpha);
    auto r = s.search(216, 3, alpha);
    for (std::size_t p = 0; p < s.sources.size(); ++p) {
      double best = -std::numeric_limits<double>::infinity();
      std::vector<int> best_tokens;
      std::function<void(std::vector<int>&)> visit = [&](std::vector<int>& seq) {
        if (!seq.empty() && (seq.back() == eos || seq.size() == 3)) {  // a complete hypothesis
          const double sc = log_prob_of(full, s.sources[p], seq) / std::pow(static_cast<double>(seq.size()), alpha);
          if (sc > best) best = sc, best_tokens = seq;
          return;
        }
        for (int v = 0; v < 6; ++v) {
          seq.push_back(v);
          visit(seq);
          seq.pop_back();
        }
      };
      std::vector<int> seq;
      visit(seq);
      CHECK(r.hypotheses[p][0].tokens == best_tokens);
      CHECK(r.hypotheses[p][0].score == Approx(best).epsilon(1e-12));
    }
  }
}

TEST_CASE("decoder-only: beam search over prompts of different lengths, width 1 greedy, scores the model's") {
  constexpr nn::transformer_config lm{.d_model = 16, .heads = 2, .ffn = 24, .decoder_layers = 2, .tgt_vocab = 7};
  using full_model = nn::language_model<lm, nn::eval_mode>;
  using step_model = nn::language_model<lm, nn::decode_mode>;
  auto full = make_graph(full_model::logits());
  auto p = full.make_params<double>(3);
  test::randomize(p, 4);
  auto step = make_graph(step_model::logits()).executor<double>(p, {.inference = true});
  const std::vector<std::vector<int>> prompts{{3, 4, 5, 6}, {5}, {6, 3}};
  auto greedy_cache = nn::kv_cache<double>::of<step_model>(3, 12);
  auto greedy = nn::generate(step, greedy_cache, prompts, {.max_new_tokens = 6, .eos = 2});
  auto one_cache = nn::kv_cache<double>::of<step_model>(3, 12);
  auto one = nn::beam_search(step, one_cache, prompts, {.beam = 1, .max_new_tokens = 6, .eos = 2});
  for (std::size_t i = 0; i < prompts.size(); ++i) CHECK(one.hypotheses[i][0].tokens == greedy.tokens[i]);
  auto cache = nn::kv_cache<double>::of<step_model>(9, 12);
  auto r = nn::beam_search(step, cache, prompts, {.beam = 3, .max_new_tokens = 6, .length_penalty = 0.5, .eos = 2});
  auto whole = full.executor<double>(p, {.inference = true});
  for (std::size_t i = 0; i < prompts.size(); ++i)
    for (const auto& h : r.hypotheses[i]) {
      // log P(tokens | prompt) by the full model over prompt + tokens
      std::vector<std::int32_t> seq(prompts[i].begin(), prompts[i].end());
      seq.insert(seq.end(), h.tokens.begin(), h.tokens.end());
      whole.forward({{"tokens", tensor<std::int32_t>(dims_t{1, static_cast<std::int64_t>(seq.size())}, seq)}});
      auto logits = whole.output();
      double lp = 0;
      for (std::size_t t = prompts[i].size(); t < seq.size(); ++t) {
        const double* row = logits.data + static_cast<std::int64_t>(t - 1) * 7;
        double mx = -1e300, sum = 0;
        for (int v = 0; v < 7; ++v) mx = std::max(mx, row[v]);
        for (int v = 0; v < 7; ++v) sum += std::exp(row[v] - mx);
        lp += row[seq[t]] - mx - std::log(sum);
      }
      CHECK(std::abs(h.log_prob - lp) < 1e-10);
    }
}

TEST_CASE("on a trained translation model, beam 4 scores at least as well as greedy on every test sentence") {
  using translation::config, translation::task, translation::pad, translation::decode_options;
  constexpr auto cfg = [] {
    auto c = config<0.0>;
    c.d_model = 32;
    c.heads = 2;
    c.ffn = 64;
    c.encoder_layers = 1;
    c.decoder_layers = 1;
    return c;
  }();
  const task t(999, 600, 10, 40, 7);
  auto g = make_graph(nn::seq2seq<cfg, nn::train_mode>::loss<pad>());
  auto params = g.make_params<float>(3);
  {
    auto run = g.executor<float>(params, {.threads = 2});
    adam<float> opt(params, {.lr = 3e-3});
    trainer_options quiet;
    quiet.total_steps = 300;
    quiet.progress.mode = progress_mode::plain;
    quiet.progress.print_every = 1'000'000;
    trainer<float> tr(run, params, opt, quiet);
    for (long step = 1; step <= 300; ++step) {
      auto b = t.train_batch(step, 32, 3);
      tr.step({{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}});
    }
  }
  using eval = nn::seq2seq<cfg, nn::eval_mode>;
  auto memory_graph = std::apply([](auto... m) { return make_graph(m...); }, eval::cross_memory());
  auto step_graph = make_graph(nn::seq2seq<cfg, nn::decode_mode>::logits());
  auto full = make_graph(eval::logits()).executor<float>(params, {.inference = true});
  auto memory = memory_graph.executor<float>(params, {.inference = true});
  auto step = step_graph.executor<float>(params, {.inference = true});
  std::vector<std::size_t> idx(t.data.test.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  const auto batch = make_batch(t.data.test, idx, t.source, t.target);
  const auto extra = translation::encode(memory, batch);
  const auto n = static_cast<std::int64_t>(idx.size());
  std::vector<std::vector<int>> prompts(idx.size(), std::vector<int>{translation::bos});
  nn::kv_cache<float> greedy_cache(step, n, 24);
  auto greedy = nn::generate(step, greedy_cache, prompts, decode_options(20), extra);
  nn::kv_cache<float> beam_cache(step, 4 * n, 24);
  auto beam = nn::beam_search(step, beam_cache, prompts,
                              {.beam = 4, .max_new_tokens = 20, .eos = translation::eos, .tokens_input = "tgt", .first_input = ""},
                              extra);
  // both scored by the full model (float), on the same footing: log P of the tokens produced
  auto score = [&](std::size_t i, const std::vector<int>& tokens) {
    auto src = t.source.encode(t.data.test[i].source);
    std::vector<std::int32_t> tgt{translation::bos};
    tgt.insert(tgt.end(), tokens.begin(), tokens.end() - 1);
    full.forward({{"src", tensor<std::int32_t>(dims_t{1, static_cast<std::int64_t>(src.size())},
                                                std::vector<std::int32_t>(src.begin(), src.end()))},
                  {"src_len", tensor<std::int32_t>(dims_t{1}, {static_cast<std::int32_t>(src.size())})},
                  {"tgt", tensor<std::int32_t>(dims_t{1, static_cast<std::int64_t>(tgt.size())}, tgt)}});
    auto logits = full.output();
    const std::int64_t v = logits.dims[-1];
    double total = 0;
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      const float* row = logits.data + static_cast<std::int64_t>(k) * v;
      double mx = -1e300, sum = 0;
      for (std::int64_t j = 0; j < v; ++j) mx = std::max(mx, static_cast<double>(row[j]));
      for (std::int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(row[j]) - mx);
      total += static_cast<double>(row[tokens[k]]) - mx - std::log(sum);
    }
    return total;
  };
  int better = 0;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    INFO(t.data.test[i].source << ": greedy \"" << t.target.decode(greedy.tokens[i]) << "\", beam \""
                               << t.target.decode(beam.hypotheses[i][0].tokens) << "\"");
    const double g_score = score(i, greedy.tokens[i]), b_score = score(i, beam.hypotheses[i][0].tokens);
    CHECK(b_score >= g_score - 1e-4);  // float scores: the same sequence scores the same to ~1e-6
    better += b_score > g_score + 1e-4;
  }
  WARN(better << " of " << idx.size() << " test sentences: beam 4 found a more likely translation than greedy");
}
