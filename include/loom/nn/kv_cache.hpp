// kv_cache: the keys and values of past positions, per attention layer, per head, per
// sequence — the explicit state of a decoding graph built with self_attention_cached.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/tensor.hpp"
#include "loom/graph/executor.hpp"
#include "loom/graph/feed.hpp"
#include "loom/graph/graph.hpp"
#include "loom/graph/plan.hpp"

namespace loom::nn {

/// Storage for the states of a decoding graph: the inputs that have an output of the same
/// name, [B, H, P, d_k] before the step and [B, H, P + T, d_k] after it
/// (self_attention_cached's `<layer>.cache_k` and `<layer>.cache_v`, see
/// nn::cache_state). For each it allocates one [B, H, capacity, d_k] block, once. A step
/// (decode_step) feeds the first length() positions with room to grow (feed::with_room), so
/// the graph writes the step's new keys and values straight into the blocks; append() then
/// only advances length() (or copies the new rows when the graph could not write them in
/// place). Exceeding the capacity throws capacity_error before anything is computed.
template <class T>
class kv_cache {
 public:
  /// A cache for every state of the decoding graph `step` (its plan), for `batch` sequences
  /// and at most `capacity` positions. Throws value_error when the graph has no state, when a
  /// state is not [B, H, P, d_k] → [B, H, P + T, d_k] with H and d_k fixed, or when batch or
  /// capacity is not positive.
  kv_cache(const plan_view& step, std::int64_t batch, std::int64_t capacity);
  /// The same, for a graph or an executor (anything with plan()).
  template <class G>
    requires requires(const G& g) {
      { g.plan() } -> std::convertible_to<plan_view>;
    }
  kv_cache(const G& step, std::int64_t batch, std::int64_t capacity) : kv_cache(plan_view(step.plan()), batch, capacity) {}

  /// A cache for the decoding graph of the model type `Model` — a decode_mode model such as
  /// language_model<C, decode_mode> or seq2seq<C, decode_mode> (its logits()) or
  /// transformer_body<C, decode_mode> (its output()): the model knows its layers, heads and
  /// head size. `auto cache = kv_cache<float>::of<nn::language_model<c, nn::decode_mode>>(4, 256);`
  template <class Model>
  static kv_cache of(std::int64_t batch, std::int64_t capacity) {
    if constexpr (requires { Model::logits(); }) return kv_cache(make_graph(Model::logits()), batch, capacity);
    else return kv_cache(make_graph(Model::output()), batch, capacity);
  }

  /// Positions cached so far (the bound value of the dim "P" in the next step).
  std::int64_t length() const { return length_; }
  std::int64_t capacity() const { return capacity_; }
  std::int64_t batch() const { return batch_; }
  /// The names of the states held, in the graph's (sorted) order.
  std::vector<std::string> names() const;
  /// Bytes of key and value storage (allocated once, at construction).
  std::size_t bytes() const;

  /// The states as feeds [B, H, length(), d_k] with room for capacity() positions, borrowed
  /// from the cache: a step's forward() may write the new positions into them.
  std::vector<feed> feeds();
  /// Takes the positions that `run`'s last forward() (fed with feeds()) added: reads each
  /// state's output, which must be [B, H, length() + n, d_k] with one n ≥ 0 for all, copies
  /// rows length() .. length() + n unless the graph wrote them in place, and advances length()
  /// by n (returned). Throws shape_error when an output does not fit (was the step run with
  /// this cache's feeds?), capacity_error past the capacity; the cache is unchanged then.
  std::int64_t append(const executor<T>& run);
  /// Reorders the cached sequences: sequence b becomes what sequence from[b] was (a gather of
  /// the cache rows by beam origin, as beam search needs after choosing its beams; from may
  /// repeat and skip sequences). Copies length() positions per sequence, not the capacity.
  /// Throws value_error (changing nothing) when from has not batch() entries or one is
  /// outside [0, batch()).
  void reorder(std::span<const std::int64_t> from);
  /// Forgets every position: the cache is ready for a new prompt.
  void reset() { length_ = 0; }
  /// Rewinds to `length` positions (≤ length()), e.g. to retry from an earlier point.
  void truncate(std::int64_t length);
  /// A copy of the cached positions of the state `name`: [B, H, length(), d_k]. Throws
  /// missing_error for a name the cache does not hold.
  tensor<T> state(std::string_view name) const;

 private:
  struct block {
    std::string name;
    std::int64_t heads = 0, head_dim = 0;
    tensor<T> storage;  // [B, H, capacity, d_k]
  };
  const block& find(std::string_view name) const;
  std::vector<block> blocks_;
  std::string p_name_;  // the dim of the cached positions ("P")
  std::int64_t batch_, capacity_, length_ = 0;
  std::vector<T> scratch_;  // reorder's copy of the positions it moves
};

/// One decoding step: feeds the cache's states and `feeds` (tokens, positions, the projected
/// memory, ...) to `run`, runs forward(), and appends the step's new positions to the cache.
/// Returns their number. Throws what forward() throws — capacity_error when the step would
/// exceed the cache — and then leaves the cache's length unchanged.
template <class T>
std::int64_t decode_step(executor<T>& run, kv_cache<T>& cache, std::span<const feed> feeds);
template <class T>
std::int64_t decode_step(executor<T>& run, kv_cache<T>& cache, std::initializer_list<feed> feeds) {
  return decode_step(run, cache, std::span<const feed>(feeds.begin(), feeds.size()));
}

extern template class kv_cache<float>;
extern template class kv_cache<double>;

}  // namespace loom::nn
