// Gradient accumulation: the gradients of several micro-batches summed in one fixed order, so
// that a step over K micro-batches gives the same bits however they are spread over processes.
//
// The order is a tree over the micro-batches 0..K-1: the sum over [lo, hi) is
//   sum[lo, hi) = sum[lo, m) + sum[m, hi),  m = lo + the largest power of two below hi - lo,
// with single micro-batches as leaves; K = 4 gives (g0 + g1) + (g2 + g3), K = 3 gives
// (g0 + g1) + g2. loom::distributed sums the ranks' partial sums with the same tree, so when each
// rank holds a power-of-two number of consecutive micro-batches (one, say), N ranks × A
// micro-batches give the bits of one process accumulating N·A (docs/distributed.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "loom/core/params.hpp"

namespace loom {

/// The largest power of two strictly below n (n >= 2): where the tree splits [lo, lo + n).
constexpr std::int64_t tree_split(std::int64_t n) {
  std::int64_t p = 1;
  while (2 * p < n) p *= 2;
  return p;
}

/// The tree-order sum of values (see above): the micro-batches' losses are added this way.
/// Returns 0 for no values.
double tree_sum(std::span<const double> values);

/// Sums micro-batches' gradients in the tree order. After each micro-batch's backward but the
/// last, push() records the gradients in the store; after the last, finish() replaces each
/// gradient in the store (the last micro-batch's) by the sum over all of them. Partial sums
/// use at most log2(K) + 1 copies of the gradients. Parameters are addressed by slot: their
/// position in the store's name order. Not thread-safe, except finish(slot) for distinct slots.
template <class T>
class gradient_accumulator {
 public:
  /// An accumulator of the gradients in `params`, which must outlive it.
  explicit gradient_accumulator(param_store<T>& params);

  /// Starts a step: forgets every partial sum and takes the store's parameters (names, shapes)
  /// as they are now.
  void clear();
  /// Adds the gradients now in the store as the next micro-batch.
  void push();
  /// Micro-batches pushed since clear().
  std::int64_t pushed() const { return pushed_; }
  /// Number of slots (parameters in the store when clear() was called).
  std::size_t slots() const { return grads_.size(); }

  /// Replaces slot's gradient in the store — the last micro-batch's — by the sum over every
  /// micro-batch, divided by `divisor` unless it is 1. May run concurrently for distinct slots.
  void finish(std::size_t slot, std::int64_t divisor = 1);
  /// finish(slot, divisor) for every slot.
  void finish_all(std::int64_t divisor = 1);

 private:
  struct level {
    std::int64_t leaves = 0;  // micro-batches summed here (a power of two)
    std::vector<T> sum;       // every slot's partial sum, back to back (offset_)
  };
  param_store<T>* params_;
  std::vector<tensor<T>*> grads_;     // per slot
  std::vector<std::int64_t> offset_;  // per slot: where it starts in a level's sum
  std::vector<level> levels_;         // partial sums, the oldest (leftmost) first
  std::vector<level> spare_;          // storage kept for the next step
  std::int64_t pushed_ = 0;
};

extern template class gradient_accumulator<float>;
extern template class gradient_accumulator<double>;

}  // namespace loom
