// kv_cache: the keys and values of past positions, per attention layer, per head, per
// sequence — the explicit state of a decoding graph built with self_attention_cached.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/tensor.hpp"
#include "loom/graph/executor.hpp"
#include "loom/graph/feed.hpp"

namespace loom::nn {

/// Storage for the cached keys and values of some attention layers: for each layer a
/// [B, H, capacity, d_k] block for keys and one for values, allocated once. A decoding step
/// reads the first length() positions through the inputs `<layer>.cache_k` and
/// `<layer>.cache_v` (see feeds()) and, after executor::forward, append() stores the keys
/// and values of the step's new positions. Exceeding the capacity throws capacity_error
/// before anything is computed or overwritten.
template <class T>
class kv_cache {
 public:
  /// A cache for the attention layers named `layers` (their parameter prefixes, e.g.
  /// "layers.0.self_attn"), for `batch` sequences, `heads` heads of `head_dim`, and at most
  /// `capacity` positions.
  kv_cache(std::vector<std::string> layers, std::int64_t batch, std::int64_t heads, std::int64_t head_dim,
           std::int64_t capacity);

  /// Positions cached so far (the bound value of the dim "P" in the next step).
  std::int64_t length() const { return length_; }
  std::int64_t capacity() const { return capacity_; }
  std::int64_t batch() const { return batch_; }
  std::int64_t heads() const { return heads_; }
  std::int64_t head_dim() const { return head_dim_; }
  const std::vector<std::string>& layers() const { return layers_; }
  /// Bytes of key and value storage (allocated once, at construction).
  std::size_t bytes() const;

  /// The inputs `<layer>.cache_k` / `<layer>.cache_v` [B, H, length, d_k] for a step that
  /// adds `new_positions`, read in place (no copy). Throws capacity_error if
  /// length() + new_positions exceeds the capacity.
  std::vector<feed> feeds(std::int64_t new_positions) const;
  /// Stores the keys and values of the last step's `new_positions` positions (read from the
  /// concat<time> nodes that consume the cache inputs in `run`) and advances length().
  /// Throws shape_error if `run` did not just run a step over this cache's length.
  void append(const executor<T>& run, std::int64_t new_positions);
  /// Forgets every position: the cache is ready for a new prompt.
  void reset() { length_ = 0; }
  /// Rewinds to `length` positions (≤ length()), e.g. to retry from an earlier point.
  void truncate(std::int64_t length);
  /// A copy of the cached keys (or values) of one layer: [B, H, length, d_k].
  tensor<T> keys(int layer) const { return copy_out(keys_.at(static_cast<std::size_t>(layer))); }
  tensor<T> values(int layer) const { return copy_out(values_.at(static_cast<std::size_t>(layer))); }

 private:
  tensor<T> copy_out(const tensor<T>& block) const;
  std::vector<std::string> layers_;
  std::vector<std::string> input_names_;  // "<layer>.cache_k", "<layer>.cache_v" per layer, in order
  std::int64_t batch_, heads_, head_dim_, capacity_, length_ = 0;
  std::vector<tensor<T>> keys_, values_;  // [B, H, capacity, d_k] each
};

extern template class kv_cache<float>;
extern template class kv_cache<double>;

}  // namespace loom::nn
