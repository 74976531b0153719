// Beam search through a KV cache: the k most likely continuations of each prompt, for an
// encoder–decoder (seq2seq<C, decode_mode>) or a decoder-only model (language_model).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loom/graph/executor.hpp"
#include "loom/graph/feed.hpp"
#include "loom/nn/kv_cache.hpp"

namespace loom::nn {

/// How beam_search searches and what it feeds.
struct beam_options {
  int beam = 4;                 // k: hypotheses kept per prompt
  int max_new_tokens = 32;      // a hypothesis that reaches this length without eos ends there (unfinished)
  double length_penalty = 0.0;  // α: hypotheses are ranked by log P / length^α (0: by log P)
  int eos = -1;                 // a hypothesis ending in this token is finished (-1: none)
  int pad = 0;                  // fed before a short prompt and for finished hypotheses
  // input names of the step graph, as generate_options; first_input may be empty when the
  // prompts have equal lengths
  std::string tokens_input = "tokens";
  std::string positions_input = "positions";
  std::string first_input = "first";
};

/// One hypothesis: the new tokens (with eos when finished), their log-probability under the
/// model (Σ log softmax of the step's logits) and score = log_prob / tokens.size()^α.
struct beam_hypothesis {
  std::vector<int> tokens;
  double log_prob = 0;
  double score = 0;
  bool finished = false;  // ended with eos (else it reached max_new_tokens)
};

/// What beam_search found: per prompt, its beam's hypotheses, best first.
struct beam_result {
  std::vector<std::vector<beam_hypothesis>> hypotheses;
  std::int64_t steps = 0;  // decode steps after the prefill
  double seconds = 0;
};

/// The k best continuations of each prompt under `step` (an executor of a decode-mode graph:
/// inputs tokens [N, T], positions [N, T], first [N] as named in the options, the cache's
/// states and `extra`; output 0 logits [N, T, V]), with N = prompts.size() · k: the cache's
/// batch. Prompt p's hypotheses live in cache rows p·k .. p·k + k − 1. `extra` feeds have one
/// row per prompt along their first axis (the encoder memory, its lengths) and are repeated k
/// times here. The beam of a prompt holds its k best hypotheses by score, finished or not: at
/// each step the live ones are extended by every token, the finished ones stay, and the k best
/// of all these remain; the cache rows follow their hypotheses (kv_cache::reorder, no
/// recomputation). A prompt is done when its beam holds no live hypothesis; with k = 1 this is
/// greedy decoding. Throws shape_error when the cache's batch is not prompts.size() · k,
/// value_error for an empty prompt, k < 1, a negative max_new_tokens, a length_penalty that is
/// not finite, logits that check_logits (nn/generate.hpp) refuses, or an extra feed that is
/// strided or has not prompts.size() rows, capacity_error when prompt + max_new_tokens exceeds
/// the cache.
template <class T>
beam_result beam_search(executor<T>& step, kv_cache<T>& cache, const std::vector<std::vector<int>>& prompts,
                        const beam_options& options, std::span<const feed> extra = {});

/// The feed f with each row of its first axis repeated k times in place (rows r, r, .., r, r+1,
/// ..): what beam search feeds for k hypotheses per row. Owns its data. Throws value_error for
/// a strided feed or a scalar.
feed repeat_rows(const feed& f, std::int64_t k);

}  // namespace loom::nn
