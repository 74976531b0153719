// The translation task of examples/translate.cpp — numbers in digits to English words — as
// functions shared by the example and its tests: the model, the data, one training step,
// greedy decoding through the KV cache, and evaluation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/data/numbers.hpp"
#include "loom/data/vocab.hpp"
#include "loom/eval/bleu.hpp"
#include "loom/loom.hpp"
#include "loom/nn/beam_search.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/inspect.hpp"
#include "loom/nn/kv_cache.hpp"
#include "loom/nn/transformer.hpp"

namespace translation {

using namespace loom;

// Vocabulary sizes: <pad> <bos> <eos> <unk> plus 10 digits / 31 words (zero..nineteen,
// twenty..ninety, hundred, thousand, million). Checked against the data at run time.
constexpr long src_vocab = 14;
constexpr long tgt_vocab = 35;
constexpr int pad = 0, bos = 1, eos = 2;

/// The model: a small encoder–decoder (2 + 2 layers, d_model 64, 4 heads).
template <double Dropout = 0.0>
constexpr nn::transformer_config config{.d_model = 64, .heads = 4, .ffn = 256, .encoder_layers = 2,
                                        .decoder_layers = 2, .src_vocab = src_vocab, .tgt_vocab = tgt_vocab,
                                        .dropout = Dropout};

/// The data: distinct numbers in [0, max_number], split three ways, and both vocabularies.
struct task {
  number_splits data;
  vocab source, target;

  task(long max_number, std::size_t train, std::size_t valid, std::size_t test, std::uint64_t seed)
      : data(make_number_dataset(max_number, train, valid, test, seed)),
        source(vocab::characters({"0123456789"})),
        target(vocab::words(all_words())) {
    if (source.size() != src_vocab || target.size() != tgt_vocab)
      throw value_error("translation: vocabularies of " + std::to_string(source.size()) + " and " +
                        std::to_string(target.size()) + " tokens, the model expects " + std::to_string(src_vocab) +
                        " and " + std::to_string(tgt_vocab));
  }

  /// Every word number_to_words can use (0..99, hundred, thousand, million).
  static std::vector<std::string> all_words() {
    std::vector<std::string> sentences;
    for (long n = 0; n < 100; ++n) sentences.push_back(number_to_words(n));
    sentences.push_back(number_to_words(1'100'100));
    return sentences;
  }

  /// The training batch of step `step` (1-based): `size` examples drawn with a generator seeded
  /// by (seed, step), so a run resumed at any step sees the same batches.
  seq2seq_batch train_batch(std::int64_t step, std::size_t size, std::uint64_t seed) const {
    return make_batch(data.train, train_indices(step, size, seed), source, target);
  }
  /// The examples of train_batch(step, size, seed), as indices into data.train (to be shared
  /// between ranks and micro-batches with loom::shard_batch).
  std::vector<std::size_t> train_indices(std::int64_t step, std::size_t size, std::uint64_t seed) const {
    rng gen(seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(step));
    std::vector<std::size_t> idx(size);
    for (auto& i : idx) i = static_cast<std::size_t>(gen.below(data.train.size()));
    return idx;
  }
};

/// Target tokens of a batch (labels), for counting tokens per step.
inline std::int64_t label_tokens(const seq2seq_batch& b) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < b.target.size(); ++i) n += b.target[i] != pad;
  return n;
}

/// Runs the encoder over a batch (`memory`: an executor of the model's cross_memory() graph) and
/// returns what every decoding step of that batch is fed besides tokens, positions and cache:
/// the source lengths and each decoder layer's projected memory (borrowed from `memory`).
inline std::vector<feed> encode(executor<float>& memory, const seq2seq_batch& batch) {
  memory.forward({{"src", batch.src}, {"src_len", batch.src_len}});
  std::vector<feed> extra = memory.named_feeds();  // decoder.layers.{i}.multihead_attn.memory_k, ...
  extra.emplace_back("src_len", batch.src_len);
  return extra;
}

/// How the decoder is fed to nn::generate: every sequence starts with <bos> (so no left padding).
inline nn::generate_options decode_options(int max_new_tokens) {
  return {.max_new_tokens = max_new_tokens, .eos = eos, .pad = pad, .tokens_input = "tgt", .first_input = ""};
}

/// Greedy translations of pairs[first, first + count) through the KV cache: the encoder runs
/// once per batch, the cross-attention memory is projected once, then one token per step, its
/// weights as `weights` says (int8: the decoding step's products read int8 weights; the encoder
/// stays float).
template <nn::transformer_config C, class MemoryGraph, class StepGraph>
std::vector<std::string> translate(const task& t, const std::vector<translation_pair>& pairs,
                                   const MemoryGraph& memory_graph, const StepGraph& step_graph,
                                   param_store<float>& params, int threads,
                                   weight_precision weights = weight_precision::f32, std::size_t batch = 250) {
  auto memory = memory_graph.template executor<float>(params, {.threads = threads, .inference = true});
  // the weights do not change while translating: each is packed for the GEMM once
  // (exec_options::pack_weights), not at every step of every batch; the same bits
  auto step = step_graph.template executor<float>(
      params, {.threads = threads, .inference = true, .weights = weights, .pack_weights = true});
  std::vector<std::string> out;
  for (std::size_t b0 = 0; b0 < pairs.size(); b0 += batch) {
    std::vector<std::size_t> idx;
    for (std::size_t i = b0; i < std::min(pairs.size(), b0 + batch); ++i) idx.push_back(i);
    auto bt = make_batch(pairs, idx, t.source, t.target);
    const auto extra = encode(memory, bt);
    const auto n = static_cast<std::int64_t>(idx.size());
    nn::kv_cache<float> cache(step, n, 24);
    std::vector<std::vector<int>> prompts(idx.size(), std::vector<int>{bos});
    auto r = nn::generate(step, cache, prompts, decode_options(20), extra);
    for (auto& tokens : r.tokens) out.push_back(t.target.decode(tokens));
  }
  return out;
}

/// Beam-search translations (width `beam`, length penalty α) of pairs, through the KV cache as
/// translate() does; the cache holds `beam` rows per source and follows the hypotheses.
/// Returns the best hypothesis of each (its log-probability appended to log_probs, when given).
template <nn::transformer_config C, class MemoryGraph, class StepGraph>
std::vector<std::string> translate_beam(const task& t, const std::vector<translation_pair>& pairs,
                                        const MemoryGraph& memory_graph, const StepGraph& step_graph,
                                        param_store<float>& params, int threads, int beam, double length_penalty = 0,
                                        std::vector<double>* log_probs = nullptr, std::size_t batch = 125) {
  auto memory = memory_graph.template executor<float>(params, {.threads = threads, .inference = true});
  auto step = step_graph.template executor<float>(params, {.threads = threads, .inference = true, .pack_weights = true});
  std::vector<std::string> out;
  for (std::size_t b0 = 0; b0 < pairs.size(); b0 += batch) {
    std::vector<std::size_t> idx;
    for (std::size_t i = b0; i < std::min(pairs.size(), b0 + batch); ++i) idx.push_back(i);
    auto bt = make_batch(pairs, idx, t.source, t.target);
    const auto extra = encode(memory, bt);
    nn::kv_cache<float> cache(step, static_cast<std::int64_t>(idx.size()) * beam, 24);
    std::vector<std::vector<int>> prompts(idx.size(), std::vector<int>{bos});
    auto r = nn::beam_search(step, cache, prompts,
                             {.beam = beam, .max_new_tokens = 20, .length_penalty = length_penalty, .eos = eos,
                              .pad = pad, .tokens_input = "tgt", .first_input = ""},
                             extra);
    for (auto& h : r.hypotheses) {
      out.push_back(t.target.decode(h[0].tokens));
      if (log_probs) log_probs->push_back(h[0].log_prob);
    }
  }
  return out;
}

}  // namespace translation
