// The decoder families (nn::decoder_lm): parameters named and shaped as the Hugging Face
// checkpoints of each family, the loss passes gradcheck, and prefill plus one-token steps
// through the KV cache give the full forward's logits at every position.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "loom/loom.hpp"
#include "loom/nn/beam_search.hpp"
#include "loom/nn/decoder.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/kv_cache.hpp"
#include "loom/nn/pretrained.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

constexpr nn::decoder_config llama{.family = nn::decoder_family::llama,
                                   .d_model = 16,
                                   .heads = 4,
                                   .kv_heads = 2,
                                   .ffn = 24,
                                   .layers = 2,
                                   .vocab = 11,
                                   .eps = 1e-5,
                                   .rope_theta = 500000};
constexpr nn::decoder_config llama_mqa_interleaved{.family = nn::decoder_family::llama,
                                                   .d_model = 16,
                                                   .heads = 4,
                                                   .kv_heads = 1,
                                                   .ffn = 20,
                                                   .layers = 1,
                                                   .vocab = 0,
                                                   .rope = rope_layout::interleaved,
                                                   .tied_embeddings = true};
constexpr nn::decoder_config gpt2{.family = nn::decoder_family::gpt2,
                                  .d_model = 16,
                                  .heads = 2,
                                  .ffn = 64,
                                  .layers = 2,
                                  .vocab = 13,
                                  .max_positions = 12,
                                  .eps = 1e-5};

tensor<std::int32_t> ids(std::int64_t b, std::int64_t t, int vocab, std::uint64_t seed) {
  tensor<std::int32_t> x(dims_t{b, t});
  std::uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (std::int64_t i = 0; i < x.size(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = static_cast<std::int32_t>((s >> 33) % static_cast<std::uint64_t>(vocab));
  }
  return x;
}

std::set<std::string> names_of(const param_store<double>& p) {
  std::set<std::string> s;
  for (const auto& n : p.names()) s.insert(n);
  return s;
}

// The full forward's logits, then prefill + steps of `chunks` through the cache: the worst
// relative difference over every position.
template <nn::decoder_config C>
double cached_vs_full(param_store<double>& p, std::int64_t batch, std::vector<std::int64_t> chunks, int vocab) {
  std::int64_t total = 0;
  for (auto c : chunks) total += c;
  auto full = make_graph(nn::decoder_lm<C, nn::eval_mode>::logits());
  auto step = make_graph(nn::decoder_lm<C, nn::decode_mode>::logits());
  const auto tokens = ids(batch, total, vocab, 7);
  auto run_full = full.template executor<double>(p);
  run_full.forward({{"tokens", tokens}});
  const tensor<double> want(run_full.output());  // [B, T, V]
  const std::int64_t V = want.dim(2);

  auto cache = nn::kv_cache<double>::of<nn::decoder_lm<C, nn::decode_mode>>(batch, total);
  auto run = step.template executor<double>(p, {.inference = true});
  double diff = 0, scale = 0;
  std::int64_t t0 = 0;
  for (std::int64_t n : chunks) {
    tensor<std::int32_t> tok(dims_t{batch, n}), pos(dims_t{batch, n}), first(dims_t{batch});
    for (std::int64_t b = 0; b < batch; ++b) {
      first[b] = 0;
      for (std::int64_t t = 0; t < n; ++t) {
        tok[b * n + t] = tokens[b * total + t0 + t];
        pos[b * n + t] = static_cast<std::int32_t>(t0 + t);
      }
    }
    nn::decode_step(run, cache, {{"tokens", tok}, {"positions", pos}, {"first", first}});
    const auto got = run.output();
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t t = 0; t < n; ++t)
        for (std::int64_t v = 0; v < V; ++v) {
          const double w = want[(b * total + t0 + t) * V + v];
          diff = std::max(diff, std::abs(got.data[(b * n + t) * V + v] - w));
          scale = std::max(scale, std::abs(w));
        }
    t0 += n;
  }
  return diff / scale;
}

}  // namespace

TEST_CASE("a Llama-style decoder's parameters are the Hugging Face checkpoint's tensors, by name and shape") {
  auto g = make_graph(nn::decoder_lm<llama, nn::train_mode>::loss());
  auto p = g.make_params<double>(1);
  std::set<std::string> want{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string l = "model.layers." + std::to_string(i);
    for (const char* n : {".input_layernorm.weight", ".post_attention_layernorm.weight", ".self_attn.q_proj.weight",
                          ".self_attn.k_proj.weight", ".self_attn.v_proj.weight", ".self_attn.o_proj.weight",
                          ".mlp.gate_proj.weight", ".mlp.up_proj.weight", ".mlp.down_proj.weight"})
      want.insert(l + n);
  }
  CHECK(names_of(p) == want);
  CHECK(p.value("model.embed_tokens.weight").dims() == dims_t{11, 16});
  CHECK(p.value("model.layers.0.self_attn.q_proj.weight").dims() == dims_t{16, 16});
  CHECK(p.value("model.layers.0.self_attn.k_proj.weight").dims() == dims_t{8, 16});  // 2 kv heads of 4
  CHECK(p.value("model.layers.0.self_attn.o_proj.weight").dims() == dims_t{16, 16});
  CHECK(p.value("model.layers.1.mlp.gate_proj.weight").dims() == dims_t{24, 16});
  CHECK(p.value("model.layers.1.mlp.down_proj.weight").dims() == dims_t{16, 24});
  CHECK(p.value("lm_head.weight").dims() == dims_t{11, 16});
  // norms start at 1, weights at N(0, 0.02²)
  CHECK(p.value("model.norm.weight")[3] == 1.0);
  double sq = 0;
  const auto& w = p.value("model.layers.0.mlp.up_proj.weight");
  for (std::int64_t i = 0; i < w.size(); ++i) sq += w[i] * w[i];
  CHECK(std::sqrt(sq / static_cast<double>(w.size())) == Approx(0.02).epsilon(0.25));
}

TEST_CASE("a GPT-2-style decoder's parameters are the Hugging Face checkpoint's, Conv1D weights [in, out], head tied") {
  auto g = make_graph(nn::decoder_lm<gpt2, nn::train_mode>::loss());
  auto p = g.make_params<double>(1);
  std::set<std::string> want{"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                             "transformer.ln_f.bias"};
  for (int i = 0; i < 2; ++i) {
    const std::string l = "transformer.h." + std::to_string(i);
    for (const char* n : {".ln_1.weight", ".ln_1.bias", ".attn.c_attn.weight", ".attn.c_attn.bias",
                          ".attn.c_proj.weight", ".attn.c_proj.bias", ".ln_2.weight", ".ln_2.bias", ".mlp.c_fc.weight",
                          ".mlp.c_fc.bias", ".mlp.c_proj.weight", ".mlp.c_proj.bias"})
      want.insert(l + n);
  }
  CHECK(names_of(p) == want);  // no lm_head.weight: the head is wte
  CHECK(p.value("transformer.wpe.weight").dims() == dims_t{12, 16});
  CHECK(p.value("transformer.h.0.attn.c_attn.weight").dims() == dims_t{16, 48});
  CHECK(p.value("transformer.h.0.mlp.c_fc.weight").dims() == dims_t{16, 64});
  CHECK(p.value("transformer.h.0.mlp.c_proj.weight").dims() == dims_t{64, 16});
}

TEST_CASE("the decoder families' losses pass gradcheck in double") {
  SECTION("llama: GQA, RoPE (rotate half), SwiGLU, RMSNorm") {
    auto g = make_graph(nn::decoder_lm<llama, nn::train_mode>::loss());
    auto p = g.make_params<double>(1);
    test::randomize(p, 2);
    test::require_gradcheck(g, p, {{"tokens", ids(2, 3, 11, 1)}, {"target", ids(2, 3, 11, 2)}});
  }
  SECTION("llama: one kv head, interleaved RoPE, tied embeddings, run-time vocabulary") {
    auto g = make_graph(nn::decoder_lm<llama_mqa_interleaved, nn::train_mode>::loss());
    auto p = g.make_params<double>(1, {{"V", 9}});
    CHECK_FALSE(p.contains("lm_head.weight"));
    test::randomize(p, 3);
    test::require_gradcheck(g, p, {{"tokens", ids(1, 4, 9, 3)}, {"target", ids(1, 4, 9, 4)}});
  }
  SECTION("gpt2: learned positions, fused q|k|v, GELU-tanh, tied head") {
    auto g = make_graph(nn::decoder_lm<gpt2, nn::train_mode>::loss());
    auto p = g.make_params<double>(1);
    test::randomize(p, 4);
    test::require_gradcheck(g, p, {{"tokens", ids(2, 3, 13, 5)}, {"target", ids(2, 3, 13, 6)}});
  }
}

TEST_CASE("prefill and one-token steps through the cache give the decoder families' full logits at every position") {
  SECTION("llama") {
    auto p = make_graph(nn::decoder_lm<llama, nn::eval_mode>::logits()).make_params<double>(1);
    test::randomize(p, 5);
    CHECK(cached_vs_full<llama>(p, 2, {4, 1, 1, 1, 1}, 11) <= 1e-12);
  }
  SECTION("llama, one kv head, interleaved") {
    auto p = make_graph(nn::decoder_lm<llama_mqa_interleaved, nn::eval_mode>::logits()).make_params<double>(1, {{"V", 9}});
    test::randomize(p, 6);
    CHECK(cached_vs_full<llama_mqa_interleaved>(p, 1, {3, 2, 1, 1}, 9) <= 1e-12);
  }
  SECTION("gpt2") {
    auto p = make_graph(nn::decoder_lm<gpt2, nn::eval_mode>::logits()).make_params<double>(1);
    test::randomize(p, 7);
    CHECK(cached_vs_full<gpt2>(p, 2, {5, 1, 1, 1}, 13) <= 1e-12);
  }
}

TEST_CASE("the cache of a GQA decoder holds its kv heads, and keys are cached rotated") {
  using decode = nn::decoder_lm<llama, nn::decode_mode>;
  auto cache = nn::kv_cache<double>::of<decode>(1, 8);
  CHECK(cache.names() == std::vector<std::string>{"model.layers.0.self_attn.cache_k", "model.layers.0.self_attn.cache_v",
                                                  "model.layers.1.self_attn.cache_k", "model.layers.1.self_attn.cache_v"});
  CHECK(cache.bytes() == 4 * 1 * 2 * 8 * 4 * sizeof(double));  // 4 states of [1, 2 kv heads, 8, Dh 4]
}

TEST_CASE("greedy generation through a decoder family's cache equals recomputing the whole prefix") {
  auto eval = make_graph(nn::decoder_lm<llama, nn::eval_mode>::logits());
  auto p = eval.make_params<double>(3);
  test::randomize(p, 8);
  auto step = make_graph(nn::decoder_lm<llama, nn::decode_mode>::logits());
  auto cache = nn::kv_cache<double>::of<nn::decoder_lm<llama, nn::decode_mode>>(1, 10);
  auto run = step.executor<double>(p, {.inference = true});
  const auto r = nn::generate(run, cache, {{1, 5, 2}}, {.max_new_tokens = 5});
  REQUIRE(r.tokens[0].size() == 5);
  // recompute: the arg max of the full forward's last position, token by token
  std::vector<int> seq{1, 5, 2};
  auto full = eval.executor<double>(p);
  for (int k = 0; k < 5; ++k) {
    tensor<std::int32_t> tok(dims_t{1, static_cast<std::int64_t>(seq.size())});
    for (std::size_t i = 0; i < seq.size(); ++i) tok[static_cast<std::int64_t>(i)] = seq[i];
    full.forward({{"tokens", tok}});
    const auto out = full.output();
    const std::int64_t V = out.dims[2], last = out.dims[1] - 1;
    const double* row = out.data + last * V;
    seq.push_back(static_cast<int>(std::max_element(row, row + V) - row));
  }
  CHECK(std::vector<int>(seq.begin() + 3, seq.end()) == r.tokens[0]);
}

TEST_CASE("a GPT-2 decoder refuses positions past its learned table") {
  auto g = make_graph(nn::decoder_lm<gpt2, nn::eval_mode>::logits());
  auto p = g.make_params<double>(1);
  auto run = g.executor<double>(p);
  CHECK_THROWS_AS(run.forward({{"tokens", ids(1, 13, 13, 1)}}), shape_error);  // 13 > max_positions 12
  CHECK_NOTHROW(run.forward({{"tokens", ids(1, 12, 13, 1)}}));
}

namespace {
int count_op(const plan_view& plan, std::string_view op) {
  int n = 0;
  for (int i = 0; i < plan.size(); ++i) n += plan.order[i]->op->name == op ? 1 : 0;
  return n;
}
}  // namespace

TEST_CASE("the fused attention stays engaged around RoPE, GQA, RMSNorm and SwiGLU, in training and decoding") {
  auto train = make_graph(nn::decoder_lm<llama, nn::train_mode>::loss());
  auto p = train.make_params<double>(1);
  auto ex = train.executor<double>(p);
  CHECK(count_op(ex.plan(), "attention") == 2);  // one per layer
  CHECK(count_op(ex.plan(), "rope") == 4);       // q and k of each layer
  CHECK(count_op(ex.plan(), "rms_norm") == 5);   // two per layer and the final one
  auto step = make_graph(nn::decoder_lm<llama, nn::decode_mode>::logits());
  auto dec = step.executor<double>(p, {.inference = true});
  CHECK(count_op(dec.plan(), "attention") == 2);
  auto g2 = make_graph(nn::decoder_lm<gpt2, nn::train_mode>::loss());
  auto p2 = g2.make_params<double>(1);
  auto ex2 = g2.executor<double>(p2);
  CHECK(count_op(ex2.plan(), "attention") == 2);
  CHECK(count_op(ex2.plan(), "gelu_tanh") == 2);
}

TEST_CASE("beam search takes a decoder family's step graph: prompts of different lengths, width 1 is greedy, scores the model's") {
  auto eval = make_graph(nn::decoder_lm<gpt2, nn::eval_mode>::logits());
  auto p = eval.make_params<double>(4);
  test::randomize(p, 9);
  using decode = nn::decoder_lm<gpt2, nn::decode_mode>;
  auto run = make_graph(decode::logits()).executor<double>(p, {.inference = true});
  const std::vector<std::vector<int>> prompts{{3, 7, 1}, {5}};
  auto greedy_cache = nn::kv_cache<double>::of<decode>(2, 12);
  const auto greedy = nn::generate(run, greedy_cache, prompts, {.max_new_tokens = 4});
  auto one_cache = nn::kv_cache<double>::of<decode>(2, 12);
  const auto one = nn::beam_search(run, one_cache, prompts, {.beam = 1, .max_new_tokens = 4});
  for (std::size_t i = 0; i < prompts.size(); ++i) CHECK(one.hypotheses[i][0].tokens == greedy.tokens[i]);
  auto cache = nn::kv_cache<double>::of<decode>(2 * 3, 12);
  const auto r = nn::beam_search(run, cache, prompts, {.beam = 3, .max_new_tokens = 4});
  // each hypothesis' log-probability is the full forward's Σ log softmax over its tokens
  auto full = eval.executor<double>(p);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    REQUIRE(r.hypotheses[i].size() == 3);
    CHECK(r.hypotheses[i][0].score >= one.hypotheses[i][0].score - 1e-9);  // the beam finds at least greedy's
    for (const auto& h : r.hypotheses[i]) {
      std::vector<int> seq = prompts[i];
      seq.insert(seq.end(), h.tokens.begin(), h.tokens.end());
      tensor<std::int32_t> tok(dims_t{1, static_cast<std::int64_t>(seq.size())});
      for (std::size_t k = 0; k < seq.size(); ++k) tok[static_cast<std::int64_t>(k)] = seq[k];
      full.forward({{"tokens", tok}});
      const auto out = full.output();
      const std::int64_t V = out.dims[2];
      double lp = 0;
      for (std::size_t k = prompts[i].size(); k < seq.size(); ++k) {
        const double* row = out.data + (static_cast<std::int64_t>(k) - 1) * V;
        const double m = *std::max_element(row, row + V);
        double z = 0;
        for (std::int64_t v = 0; v < V; ++v) z += std::exp(row[v] - m);
        lp += row[seq[k]] - m - std::log(z);
      }
      CHECK(h.log_prob == Approx(lp).epsilon(1e-10));
    }
  }
}

TEST_CASE("a checkpoint is refused by a model of the other RoPE layout, and saved and loaded by its own") {
  const std::string dir = "test_decoder_interleaved";
  auto g = make_graph(nn::decoder_lm<llama_mqa_interleaved, nn::train_mode>::loss());
  auto p = g.make_params<double>(1, {{"V", 9}});
  test::randomize(p, 10);
  nn::save_pretrained(dir, llama_mqa_interleaved, p);
  auto q = g.make_params<double>(2, {{"V", 9}});
  nn::load_pretrained(dir, llama_mqa_interleaved, q);
  for (const auto& name : p.names()) CHECK(p.value(name).dims() == q.value(name).dims());
  for (std::int64_t i = 0; i < 16; ++i)  // saved as F32 (the default): the values rounded to float
    CHECK(q.value("model.norm.weight")[i] == static_cast<double>(static_cast<float>(p.value("model.norm.weight")[i])));
  // the same tensors, read as a Hugging Face (rotate half) model: refused, naming the layout
  constexpr nn::decoder_config rotate_half = [] {
    nn::decoder_config c = llama_mqa_interleaved;
    c.rope = rope_layout::rotate_half;
    return c;
  }();
  auto r = make_graph(nn::decoder_lm<rotate_half, nn::train_mode>::loss()).make_params<double>(3, {{"V", 9}});
  const param_store<double> before = r;
  CHECK_THROWS_WITH(nn::load_pretrained(dir, rotate_half, r),
                    Catch::Contains("rope_layout: file \"interleaved\", model \"rotate_half\""));
  CHECK(std::equal(before.value("model.norm.weight").data(), before.value("model.norm.weight").data() + 16,
                   r.value("model.norm.weight").data()));
  // a Hugging Face config (no rope_layout) is a rotate-half checkpoint: refused by the interleaved model
  hf::model_config hf = hf::parse_config(R"({"model_type": "llama", "hidden_size": 16, "intermediate_size": 20,
    "num_attention_heads": 4, "num_key_value_heads": 1, "num_hidden_layers": 1, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": true, "hidden_act": "silu"})");
  CHECK(nn::hf_config_differences(hf, rotate_half).empty());
  const auto differ = nn::hf_config_differences(hf, llama_mqa_interleaved);
  REQUIRE(differ.size() == 1);
  CHECK_THAT(differ[0], Catch::Contains("rope_layout"));
}
