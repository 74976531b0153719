// The Transformer built from one set of functions: gradcheck of the whole encoder–decoder,
// and KV-cached decoding (decoder-only and encoder–decoder) equal to the full forward.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "loom/loom.hpp"
#include "loom/nn/kv_cache.hpp"
#include "loom/nn/transformer.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

constexpr nn::transformer_config tiny{.d_model = 8, .heads = 2, .ffn = 12, .encoder_layers = 1, .decoder_layers = 1,
                                      .src_vocab = 7, .tgt_vocab = 6};

tensor<std::int32_t> ints(dims_t d, std::vector<std::int32_t> v) { return tensor<std::int32_t>(d, std::move(v)); }

template <nn::transformer_config C, class G>
void gradcheck_seq2seq(const G& g) {
  auto p = g.template make_params<double>(1);
  auto src = ints({2, 4}, {1, 2, 3, 4, 5, 6, 0, 0});
  auto src_len = ints({2}, {4, 2});
  auto tgt = ints({2, 3}, {1, 2, 3, 1, 4, 5});
  auto target = ints({2, 3}, {2, 3, 4, 4, 5, 0});  // 0 is padding, ignored
  auto seed = ints({2}, {7, 1});
  if constexpr (C.dropout > 0)
    test::require_gradcheck(g, p, {{"src", src}, {"src_len", src_len}, {"tgt", tgt}, {"target", target}, {"seed", seed}});
  else
    test::require_gradcheck(g, p, {{"src", src}, {"src_len", src_len}, {"tgt", tgt}, {"target", target}});
}

}  // namespace

TEST_CASE("the tiny encoder-decoder passes gradcheck end to end (loss through every parameter)") {
  SECTION("post-norm, relu") {
    gradcheck_seq2seq<tiny>(make_graph(nn::seq2seq<tiny, nn::eval_mode>::loss<0>()));
  }
  SECTION("pre-norm, gelu, label smoothing") {
    constexpr auto c = [] {
      auto k = tiny;
      k.norm_first = true;
      k.act = nn::activation::gelu;
      return k;
    }();
    gradcheck_seq2seq<c>(make_graph(nn::seq2seq<c, nn::eval_mode>::loss<0, 0.1>()));
  }
  SECTION("training mode with dropout") {
    constexpr auto c = [] {
      auto k = tiny;
      k.dropout = 0.2;
      return k;
    }();
    gradcheck_seq2seq<c>(make_graph(nn::seq2seq<c, nn::train_mode>::loss<0>()));
  }
}

TEST_CASE("parameter names follow torch.nn.Transformer's state_dict") {
  auto g = make_graph(nn::seq2seq<tiny, nn::eval_mode>::loss<0>());
  auto p = g.make_params<float>(1);
  for (const char* name :
       {"encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.0.self_attn.in_proj_bias",
        "encoder.layers.0.self_attn.out_proj.weight", "encoder.layers.0.linear1.weight", "encoder.layers.0.linear2.bias",
        "encoder.layers.0.norm1.weight", "encoder.layers.0.norm2.bias", "encoder.norm.weight",
        "decoder.layers.0.self_attn.in_proj_weight", "decoder.layers.0.multihead_attn.in_proj_weight",
        "decoder.layers.0.multihead_attn.out_proj.bias", "decoder.layers.0.norm3.weight", "decoder.norm.bias",
        "src_embed.weight", "tgt_embed.weight", "generator.weight"})
    CHECK(p.contains(name));
  CHECK(p.value("encoder.layers.0.self_attn.in_proj_weight").dims() == dims_t{24, 8});
  CHECK(p.value("encoder.layers.0.linear1.weight").dims() == dims_t{12, 8});
}

// ---------------------------------------------------------------- decoding

namespace {

template <class T>
double max_abs(tensor_view<const T> v) {
  double m = 0;
  for (std::int64_t i = 0; i < v.size(); ++i) m = std::max(m, std::abs(static_cast<double>(v[i])));
  return m;
}

// Decoder-only model: sequences of different lengths, prompts of different lengths (aligned
// right, masked with `first`), prefilled in `chunks`, then decoded one token at a time in a
// batch; every logit compared with a full forward of that sequence alone.
template <class T, int H>
double lm_cached_vs_full(const std::vector<std::vector<std::int32_t>>& seqs, const std::vector<std::int64_t>& prompt,
                         const std::vector<std::int64_t>& chunks) {
  constexpr nn::transformer_config c{.d_model = 16, .heads = H, .ffn = 24, .decoder_layers = 2, .tgt_vocab = 11};
  using full_model = nn::language_model<c, nn::eval_mode>;
  using step_model = nn::language_model<c, nn::decode_mode>;
  auto full = make_graph(full_model::logits());
  auto step = make_graph(step_model::logits());
  auto params = full.template make_params<T>(5);
  const std::int64_t B = static_cast<std::int64_t>(seqs.size()), V = c.tgt_vocab;
  const std::int64_t pmax = *std::max_element(prompt.begin(), prompt.end());

  // reference logits, one sequence at a time
  std::vector<tensor<T>> want;
  auto run_full = full.template executor<T>(params);
  for (const auto& s : seqs) {
    auto toks = ints({1, static_cast<std::int64_t>(s.size())}, s);
    run_full.forward({{"tokens", toks}});
    want.emplace_back(run_full.output());
  }

  std::int64_t steps = static_cast<std::int64_t>(seqs[0].size()) - prompt[0];
  nn::kv_cache<T> cache(step, B, pmax + steps);
  auto run = step.template executor<T>(params, {.inference = true});
  tensor<std::int32_t> first({B});
  for (std::int64_t b = 0; b < B; ++b) first[b] = static_cast<std::int32_t>(pmax - prompt[static_cast<std::size_t>(b)]);

  double worst = 0, scale = 0;
  auto compare = [&](tensor_view<const T> got, std::int64_t slot0, std::int64_t n) {
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < n; ++t) {
        const std::int64_t pos = slot0 + t - first[b];  // position in sequence b
        if (pos < 0) continue;                          // padding slot
        for (std::int64_t v = 0; v < V; ++v) {
          const double w = want[static_cast<std::size_t>(b)][pos * V + v];
          worst = std::max(worst, std::abs(static_cast<double>(got[(b * n + t) * V + v]) - w));
          scale = std::max(scale, std::abs(w));
        }
      }
  };
  auto run_step = [&](std::int64_t slot0, std::int64_t n) {
    tensor<std::int32_t> toks({B, n}), pos({B, n});
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < n; ++t) {
        const std::int64_t p = slot0 + t - first[b];
        toks[b * n + t] = p < 0 ? 0 : seqs[static_cast<std::size_t>(b)][static_cast<std::size_t>(p)];
        pos[b * n + t] = static_cast<std::int32_t>(std::max<std::int64_t>(p, 0));
      }
    nn::decode_step(run, cache, {{"tokens", toks}, {"positions", pos}, {"first", first}});
    compare(run.output(), slot0, n);
  };
  std::int64_t slot = 0;
  for (auto n : chunks) {
    run_step(slot, n);
    slot += n;
  }
  REQUIRE(slot == pmax);
  for (std::int64_t s = 0; s < steps; ++s) run_step(slot++, 1);
  return worst / scale;
}

const std::vector<std::vector<std::int32_t>> one_seq{{3, 1, 4, 1, 5, 9, 2, 6}};
const std::vector<std::vector<std::int32_t>> mixed{{3, 1, 4, 1, 5, 9, 2}, {2, 7, 1, 8, 2}, {1, 6, 1, 8, 0, 3}};

}  // namespace

TEMPLATE_TEST_CASE_SIG("decoder-only: prefill + one-token steps equal the full causal forward", "", ((int H), H), 1,
                       2, 4) {
  SECTION("double, batch 1") { CHECK(lm_cached_vs_full<double, H>(one_seq, {3}, {3}) <= 1e-12); }
  SECTION("float, batch 1") { CHECK(lm_cached_vs_full<float, H>(one_seq, {3}, {3}) <= 1e-5); }
  // mixed prompt lengths 4, 2, 3, then 3 decode steps each
  SECTION("double, mixed lengths") { CHECK(lm_cached_vs_full<double, H>(mixed, {4, 2, 3}, {4}) <= 1e-12); }
  SECTION("float, mixed lengths") { CHECK(lm_cached_vs_full<float, H>(mixed, {4, 2, 3}, {4}) <= 1e-5); }
}

TEST_CASE("decoder-only: a prefill in chunks equals one pass") {
  CHECK(lm_cached_vs_full<double, 2>(one_seq, {5}, {2, 1, 2}) <= 1e-12);
  CHECK(lm_cached_vs_full<float, 2>(mixed, {4, 2, 3}, {1, 3}) <= 1e-5);
}

namespace {

// Encoder–decoder: encode once, project the memory once, decode the target one token at a
// time (after a prefill of `prefill` tokens); compare with the full forward's logits.
template <class T, int H>
double seq2seq_cached_vs_full(std::int64_t prefill) {
  constexpr nn::transformer_config c{.d_model = 16, .heads = H, .ffn = 24, .encoder_layers = 2, .decoder_layers = 2,
                                     .src_vocab = 9, .tgt_vocab = 10};
  using eval = nn::seq2seq<c, nn::eval_mode>;
  using dec = nn::seq2seq<c, nn::decode_mode>;
  auto full = make_graph(eval::logits());
  auto memory = std::apply([](auto... m) { return make_graph(m...); }, eval::cross_memory());
  auto step = make_graph(dec::logits());
  auto params = full.template make_params<T>(9);

  auto src = ints({2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 0, 0});
  auto src_len = ints({2}, {5, 3});
  auto tgt = ints({2, 6}, {1, 3, 5, 7, 9, 2, 1, 4, 6, 8, 3, 5});
  const std::int64_t B = 2, T_ = 6, V = c.tgt_vocab;

  auto run_full = full.template executor<T>(params);
  run_full.forward({{"src", src}, {"src_len", src_len}, {"tgt", tgt}});
  tensor<T> want(run_full.output());

  auto run_mem = memory.template executor<T>(params, {.inference = true});
  run_mem.forward({{"src", src}, {"src_len", src_len}});
  const std::vector<feed> projected = run_mem.named_feeds();  // the decoder's memory inputs, by name
  REQUIRE(projected.size() == 2 * static_cast<std::size_t>(c.decoder_layers));

  nn::kv_cache<T> cache(step, B, T_);
  auto run = step.template executor<T>(params, {.inference = true});
  double worst = 0;
  std::int64_t t0 = 0;
  while (t0 < T_) {
    const std::int64_t n = t0 == 0 ? prefill : 1;
    tensor<std::int32_t> toks({B, n}), pos({B, n});
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < n; ++t) {
        toks[b * n + t] = tgt[b * T_ + t0 + t];
        pos[b * n + t] = static_cast<std::int32_t>(t0 + t);
      }
    std::vector<feed> feeds(projected);
    feeds.emplace_back("tgt", toks);
    feeds.emplace_back("positions", pos);
    feeds.emplace_back("src_len", src_len);
    nn::decode_step(run, cache, feeds);
    auto got = run.output();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < n; ++t)
        for (std::int64_t v = 0; v < V; ++v)
          worst = std::max(worst, std::abs(static_cast<double>(got[(b * n + t) * V + v]) -
                                           static_cast<double>(want[(b * T_ + t0 + t) * V + v])));
    t0 += n;
  }
  return worst / max_abs<T>(std::as_const(want).view());
}

}  // namespace

TEMPLATE_TEST_CASE_SIG("encoder-decoder: cached decoding with memory projected once equals the full forward", "",
                       ((int H), H), 1, 2, 4) {
  SECTION("double") { CHECK(seq2seq_cached_vs_full<double, H>(1) <= 1e-12); }
  SECTION("float") { CHECK(seq2seq_cached_vs_full<float, H>(1) <= 1e-5); }
  SECTION("double, prefill of 3") { CHECK(seq2seq_cached_vs_full<double, H>(3) <= 1e-12); }
}

TEST_CASE("the Transformer body on embedded inputs builds and passes gradcheck") {
  using body = nn::transformer_body<tiny, nn::eval_mode>;
  auto g = make_graph(body::output());
  auto p = g.make_params<double>(2);
  auto src = test::random_tensor<double>({2, 3, 8}, 3);
  auto tgt = test::random_tensor<double>({2, 2, 8}, 4);
  auto len = ints({2}, {3, 2});
  test::require_gradcheck(g, p, {{"src_x", src}, {"tgt_x", tgt}, {"src_len", len}});
}

#include "loom/nn/inspect.hpp"

TEST_CASE("cross-attention weights of a decoder layer are nodes of the model's own graph") {
  constexpr auto c = [] {
    auto k = tiny;
    k.decoder_layers = 2;
    return k;
  }();
  using model = nn::seq2seq<c, nn::eval_mode>;
  auto logits = model::logits();
  auto w1 = nn::seq2seq_cross_weights<c, 1>();
  auto alone = make_graph(logits);
  auto both = make_graph(logits, w1);
  // the weights are already part of the model: adding them as an output adds no node
  CHECK(both.size() == alone.size());
  auto p = both.make_params<double>(1);
  auto run = both.executor<double>(p);
  auto src = ints({1, 4}, {1, 2, 3, 4});
  auto len = ints({1}, {3});
  auto tgt = ints({1, 2}, {1, 2});
  run.forward({{"src", src}, {"src_len", len}, {"tgt", tgt}});
  auto w = run.output(1);
  REQUIRE(w.dims == dims_t{1, 2, 2, 4});
  for (std::int64_t row = 0; row < 4; ++row) {  // each row sums to 1 over the 3 valid keys
    double total = 0;
    for (int j = 0; j < 4; ++j) total += w[row * 4 + j];
    CHECK(total == Approx(1.0).epsilon(1e-12));
    CHECK(w[row * 4 + 3] == 0.0);  // the padded source position
  }
}
