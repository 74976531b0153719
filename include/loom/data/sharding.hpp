// Splitting the data of a step between processes (data parallelism) and micro-batches
// (gradient accumulation), deterministically: what a process trains on depends only on the
// seed, the step and its rank, no example of a step goes to two of them and none is left out.
//
// A step's batch is cut into K micro-batches of equal size, numbered 0..K-1; rank r of N takes
// the consecutive block of K/N of them starting at r·K/N. Gradients are summed over the
// micro-batches in the order of their numbers (train/accumulate.hpp), so the same batch and K
// give the same step for every N that divides K.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace loom {

/// Micro-batches [first, first + count) of a step's K micro-batches belong to one rank.
struct micro_batch_range {
  std::int64_t first = 0, count = 0;
};

/// The micro-batches of `rank` among `ranks` when a step has `micro_batches` of them. Throws
/// value_error unless 0 <= rank < ranks and ranks divides micro_batches.
micro_batch_range rank_micro_batches(std::int64_t micro_batches, int rank, int ranks);

/// The micro-batches (lists of example indices) of `rank` among `ranks` when `batch` is cut into
/// `micro_batches` of equal size: micro-batch j holds batch[j·b, (j+1)·b), b = size / K. Throws
/// value_error unless K divides the batch's size and rank_micro_batches accepts the rest.
std::vector<std::vector<std::size_t>> shard_batch(std::span<const std::size_t> batch, std::int64_t micro_batches,
                                                  int rank, int ranks);

/// Sampling without replacement, epoch after epoch: the examples 0..n-1 in a seeded random
/// order, then in another, and so on; step s (counting from 1) takes positions
/// [(s-1)·batch, s·batch) of that stream, so every example is seen once per epoch (a batch
/// straddling two epochs ends one and starts the next). Not thread-safe (it caches an epoch's
/// order).
class epoch_sampler {
 public:
  /// Throws value_error if examples or batch is 0.
  epoch_sampler(std::size_t examples, std::size_t batch, std::uint64_t seed);
  /// The example indices of step `step` (>= 1; value_error otherwise).
  std::vector<std::size_t> batch(std::int64_t step);
  /// The order of the examples in epoch `epoch` (counting from 0).
  const std::vector<std::size_t>& order(std::int64_t epoch);

 private:
  std::size_t examples_, batch_;
  std::uint64_t seed_;
  std::int64_t cached_epoch_ = -1;
  std::vector<std::size_t> cached_;
};

}  // namespace loom
