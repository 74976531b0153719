// What the character-level language-model examples (charlm, llama) share: their settings, the
// validation loss and sampling through the KV cache.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cli.hpp"
#include "loom/data/vocab.hpp"
#include "loom/data/windows.hpp"
#include "loom/graph/executor.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/kv_cache.hpp"

namespace examples {

/// The programs' settings, one declaration each: reflected below, they give the command line
/// (--minutes, --top-k, ...: each checked against its range) and the run's record in
/// settings.txt, by the fields' names. The defaults are charlm's; llama sets its own number of
/// steps and folder before parsing.
struct lm_settings {
  cli::setting<double, "stop training after this many minutes", 0, 1'000'000> minutes = 2.5;
  cli::setting<long, "training steps", 1, 100'000'000> steps = 4000;
  cli::setting<int, "worker threads (0: all cores)", 0, loom::max_threads> threads = 0;
  cli::setting<std::string, "folder of the files written"> out = std::string("out/charlm");
  cli::setting<std::uint64_t, "seed of the text, the initial weights, the batches and the samples", 0, UINT64_MAX - 4>
      seed = 1;
  cli::setting<double, "sample from softmax(logits / T); 0: greedy", 0, 100> temperature = 0.8;
  cli::setting<int, "sample among the K most likely characters (0: all)", 0, 1000> top_k = 5;
};
}  // namespace examples
BOOST_HANA_ADAPT_STRUCT(examples::lm_settings, minutes, steps, threads, out, seed, temperature, top_k);
namespace examples {

/// The mean loss of `eval` (a loss graph with inputs "tokens" and "target", run for inference)
/// over the first 8 batches of 32 windows of `valid` (fewer if it has fewer).
inline double validation_loss(loom::executor<float>& eval, const loom::window_batcher& valid) {
  double total = 0;
  const std::int64_t batches = std::min<std::int64_t>(8, valid.windows() / 32);
  for (std::int64_t b = 0; b < batches; ++b) {
    auto batch = valid.consecutive(b * 32, 32);
    eval.forward({{"tokens", batch.tokens}, {"target", batch.target}});
    total += eval.output()[0];
  }
  return total / static_cast<double>(batches);
}

/// A continuation of `prompt` through the KV cache, as text (prompt + new characters).
inline std::string sample(loom::executor<float>& step, loom::nn::kv_cache<float>& cache, const loom::vocab& chars,
                          const std::string& prompt,
                   int new_chars, double temperature, int top_k, std::uint64_t seed) {
  const auto ids = chars.encode(prompt);
  auto r = loom::nn::generate(step, cache, {std::vector<int>(ids.begin(), ids.end())},
                        {.max_new_tokens = new_chars, .temperature = temperature, .top_k = top_k, .seed = seed});
  std::string text = prompt;
  for (int id : r.tokens[0]) text += id >= 4 ? chars.token(id) : "";  // no special tokens in a sample
  return text;
}

}  // namespace examples
