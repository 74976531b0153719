// The decoder-only path: a language model whose vocabulary is learnt at run time (the dim "V"
// bound by its parameters), its loss on windows of a text, a cache made from the model type,
// and generation through it equal to recomputing the prefix.
#include <catch2/catch.hpp>

#include <cmath>

#include "loom/data/vocab.hpp"
#include "loom/data/windows.hpp"
#include "loom/loom.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/kv_cache.hpp"
#include "loom/nn/transformer.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {
constexpr nn::transformer_config lm{.d_model = 8, .heads = 2, .ffn = 16, .decoder_layers = 2, .tgt_vocab = 0};
using eval_model = nn::language_model<lm, nn::eval_mode>;
using decode_model = nn::language_model<lm, nn::decode_mode>;
}  // namespace

TEST_CASE("a language model's vocabulary size can be learnt at run time: the parameters bind V") {
  const vocab chars = vocab::characters({"abcab cab"});  // 4 special tokens + a, b, c, ' '
  REQUIRE(chars.size() == 8);
  auto g = make_graph(eval_model::logits());
  auto p = g.make_params<double>(1, {{"V", chars.size()}});
  CHECK(p.value("embed.weight").dims() == dims_t{8, 8});
  CHECK(p.value("lm_head.weight").dims() == dims_t{8, 8});
  CHECK(p.value("lm_head.bias").dims() == dims_t{8});
  auto run = g.executor<double>(p);
  auto ids = chars.encode("abcab");
  run.forward({{"tokens", tensor<std::int32_t>(dims_t{1, 5}, std::vector<std::int32_t>(ids.begin(), ids.end()))}});
  CHECK(run.output().dims == dims_t{1, 5, 8});
  CHECK(run.bound("V") == 8);
  // an id past the learnt vocabulary is the embedding's error, naming it
  CHECK_THROWS_WITH(run.forward({{"tokens", tensor<std::int32_t>(dims_t{1, 2}, {4, 8})}}),
                    Catch::Contains("token id 8") && Catch::Contains("[0, 8)"));
  // without the size, making the parameters says which dim to give
  CHECK_THROWS_WITH(g.make_params<double>(1), Catch::Contains("\"V\"") && Catch::Contains("make_params"));
  // parameters of two different vocabularies: the message names V and both sources
  param_store<double> mixed = g.make_params<double>(1, {{"V", 8}});
  mixed.set("lm_head.bias", tensor<double>(dims_t{9}));
  auto bad = g.executor<double>(mixed);
  CHECK_THROWS_WITH(bad.forward({{"tokens", tensor<std::int32_t>(dims_t{1, 2}, {4, 5})}}),
                    Catch::Contains("dim \"V\" is 8") && Catch::Contains("lm_head.bias"));
}

TEST_CASE("the language model's loss on text windows passes gradcheck, with int64 ids") {
  const std::string text = "the cat sat. the hat sat. a cat at a hat.";
  const vocab chars = vocab::characters({text});
  const window_batcher windows(chars.encode(text), 6);
  auto g = make_graph(eval_model::loss());
  auto p = g.make_params<double>(2, {{"V", chars.size()}});
  test::randomize(p, 3);
  const lm_batch b = windows.random(1, 2, 4);
  test::require_gradcheck(g, p, {{"tokens", b.tokens}, {"target", b.target}});
  tensor<std::int64_t> tokens64(b.tokens.dims()), target64(b.target.dims());
  for (std::int64_t i = 0; i < b.tokens.size(); ++i) tokens64[i] = b.tokens[i], target64[i] = b.target[i];
  auto run = g.executor<double>(p);
  run.forward({{"tokens", b.tokens}, {"target", b.target}});
  const double loss32 = run.output()[0];
  run.forward({{"tokens", tokens64}, {"target", target64}});
  CHECK(run.output()[0] == loss32);
}

TEST_CASE("a cache made from the model type holds the model's layers, and generation through it is greedy decoding") {
  auto full = make_graph(eval_model::logits());
  auto step = make_graph(decode_model::logits());
  auto p = full.make_params<double>(5, {{"V", 11}});
  test::randomize(p, 6);
  auto cache = nn::kv_cache<double>::of<decode_model>(1, 12);
  const nn::kv_cache<double> from_graph(step, 1, 12);
  CHECK(cache.names() == from_graph.names());
  CHECK(cache.names() == std::vector<std::string>{"layers.0.self_attn.cache_k", "layers.0.self_attn.cache_v",
                                                  "layers.1.self_attn.cache_k", "layers.1.self_attn.cache_v"});
  CHECK(cache.bytes() == from_graph.bytes());
  auto run = step.executor<double>(p, {.inference = true});
  auto r = nn::generate(run, cache, {{4, 7, 5}}, {.max_new_tokens = 6});
  // the same tokens by running the full model over the whole prefix each time
  std::vector<int> seq{4, 7, 5};
  auto whole = full.executor<double>(p);
  for (int token : r.tokens[0]) {
    whole.forward({{"tokens", tensor<std::int32_t>(dims_t{1, static_cast<std::int64_t>(seq.size())},
                                                   std::vector<std::int32_t>(seq.begin(), seq.end()))}});
    auto logits = whole.output();
    std::span<const double> last(logits.data + (static_cast<std::int64_t>(seq.size()) - 1) * 11, 11);
    CHECK(nn::pick_token<double>(last, 0.0, 0, 0.0) == token);
    seq.push_back(token);
  }
}
