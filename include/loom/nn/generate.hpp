// Autoregressive generation through a KV cache: greedy, or sampled with temperature and top-k.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "loom/graph/executor.hpp"
#include "loom/graph/feed.hpp"
#include "loom/nn/kv_cache.hpp"

namespace loom::nn {

/// How generate() picks tokens and what it feeds.
struct generate_options {
  int max_new_tokens = 32;
  double temperature = 0.0;  // 0: greedy (arg max); > 0: sample from softmax(logits / temperature)
  int top_k = 0;             // when sampling, only among the k most likely tokens (0: all)
  std::uint64_t seed = 0;    // sampling is reproducible for a seed
  int eos = -1;              // a sequence stops after producing this token (-1: never)
  int pad = 0;               // the token fed before a short prompt and after a sequence stopped
  // input names of the step graph; first_input may be empty when prompts have equal lengths
  std::string tokens_input = "tokens";
  std::string positions_input = "positions";
  std::string first_input = "first";
};

/// What generate() produced.
struct generate_result {
  std::vector<std::vector<int>> tokens;  // per sequence, the new tokens (up to and with eos)
  std::int64_t steps = 0;                // decode steps after the prefill
  double prefill_seconds = 0, decode_seconds = 0;
};

/// Generates continuations of `prompts` (one per sequence of the cache's batch; lengths may
/// differ: prompts are aligned right and the graph's left-padding mask hides the gap) with
/// `step`, an executor of a decode-mode graph whose inputs are tokens [B, T], positions
/// [B, T], first [B] (see generate_options), the cache's inputs and `extra` (e.g. the
/// projected encoder memory), and whose output 0 is logits [B, T, V]. The cache is reset
/// first. Calls on_token(sequence, token) as each token is chosen. Throws capacity_error when
/// prompt + max_new_tokens exceeds the cache, value_error for an empty prompt, a temperature
/// that is negative or not finite, a negative top_k or max_new_tokens, and logits that
/// check_logits refuses.
template <class T>
generate_result generate(executor<T>& step, kv_cache<T>& cache, const std::vector<std::vector<int>>& prompts,
                         const generate_options& options, std::span<const feed> extra = {},
                         const std::function<void(std::size_t, int)>& on_token = {});

/// Throws value_error, naming `who` and the first bad index, when a logit is NaN or +inf, or
/// when every logit is −inf: no token could be chosen by a rule worth trusting. A −inf logit
/// alone is allowed: its token has probability 0 (the usual way to forbid a token).
template <class T>
void check_logits(std::span<const T> logits, const char* who);

/// Picks a token from logits [V]: arg max when temperature is 0, else a sample (see
/// generate_options) drawn with `draw`, a uniform number in [0, 1). Throws value_error for
/// settings out of their domain (as generate()), a draw outside [0, 1) and logits that
/// check_logits refuses.
template <class T>
int pick_token(std::span<const T> logits, double temperature, int top_k, double draw);

}  // namespace loom::nn
