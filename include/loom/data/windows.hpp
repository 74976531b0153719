// Batches for a language model: windows of one long sequence of token ids, each position's
// target being the token that follows it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "loom/core/tensor.hpp"

namespace loom {

/// A language model's batch: B windows of T tokens and, at each position, the next token.
struct lm_batch {
  tensor<std::int32_t> tokens;  // [B, T]
  tensor<std::int32_t> target;  // [B, T]: target[b, t] = tokens[b, t + 1], and after the window's end its next id
};

/// Windows of `window` + 1 consecutive ids of one sequence (a text encoded with
/// vocab::characters, say): the first `window` are a row of tokens, the last `window` its
/// targets — nn::language_model<C>::loss()'s inputs "tokens" and "target".
class window_batcher {
 public:
  /// Throws value_error when window < 1 or the sequence has fewer than window + 1 ids.
  window_batcher(std::vector<int> ids, std::int64_t window);

  /// `size` windows starting at offsets drawn uniformly from rng(seed, step): a run resumed at
  /// any step sees the same batches. Throws value_error when size < 1.
  lm_batch random(std::int64_t step, std::int64_t size, std::uint64_t seed) const;
  /// The windows first, first + 1, .., first + count − 1 of the sequence cut into windows()
  /// non-overlapping ones (indices taken modulo windows()): for a validation loss over all of
  /// it. Throws value_error when count < 1.
  lm_batch consecutive(std::int64_t first, std::int64_t count) const;

  /// Non-overlapping windows in the sequence.
  std::int64_t windows() const { return (static_cast<std::int64_t>(ids_.size()) - 1) / window_; }
  std::int64_t window() const { return window_; }
  std::span<const int> ids() const { return ids_; }

 private:
  lm_batch at(std::span<const std::int64_t> offsets) const;
  std::vector<int> ids_;
  std::int64_t window_;
};

}  // namespace loom
