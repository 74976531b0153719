// Sampling a character-level language model through its KV cache (charlm, llama).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/data/vocab.hpp"
#include "loom/graph/executor.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/kv_cache.hpp"

namespace examples {

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
