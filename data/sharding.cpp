// Sharding a step's batch between ranks and micro-batches (include/loom/data/sharding.hpp).
#include "loom/data/sharding.hpp"

#include <numeric>
#include <string>
#include <utility>

#include "loom/core/errors.hpp"
#include "loom/core/random.hpp"

namespace loom {

micro_batch_range rank_micro_batches(std::int64_t micro_batches, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw value_error("rank_micro_batches: rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                      " ranks does not exist");
  if (micro_batches < 1 || micro_batches % ranks != 0)
    throw value_error("rank_micro_batches: " + std::to_string(micro_batches) + " micro-batches per step cannot go " +
                      "to " + std::to_string(ranks) + " ranks in equal shares (give a multiple of the rank count)");
  const std::int64_t each = micro_batches / ranks;
  return {rank * each, each};
}

std::vector<std::vector<std::size_t>> shard_batch(std::span<const std::size_t> batch, std::int64_t micro_batches,
                                                  int rank, int ranks) {
  const micro_batch_range mine = rank_micro_batches(micro_batches, rank, ranks);
  const auto size = static_cast<std::int64_t>(batch.size());
  if (size % micro_batches != 0 || size == 0)
    throw value_error("shard_batch: a batch of " + std::to_string(size) + " examples cannot be cut into " +
                      std::to_string(micro_batches) + " micro-batches of equal size");
  const std::int64_t each = size / micro_batches;
  std::vector<std::vector<std::size_t>> out;
  for (std::int64_t j = mine.first; j < mine.first + mine.count; ++j)
    out.emplace_back(batch.begin() + j * each, batch.begin() + (j + 1) * each);
  return out;
}

epoch_sampler::epoch_sampler(std::size_t examples, std::size_t batch, std::uint64_t seed)
    : examples_(examples), batch_(batch), seed_(seed) {
  if (examples == 0 || batch == 0)
    throw value_error("epoch_sampler: " + std::to_string(examples) + " examples in batches of " +
                      std::to_string(batch) + " (both must be positive)");
}

const std::vector<std::size_t>& epoch_sampler::order(std::int64_t epoch) {
  if (epoch == cached_epoch_) return cached_;
  // Fisher–Yates with a generator seeded by (seed, epoch)
  rng gen(seed_ * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(epoch) + 1);
  cached_.resize(examples_);
  std::iota(cached_.begin(), cached_.end(), std::size_t{0});
  for (std::size_t i = examples_ - 1; i > 0; --i) std::swap(cached_[i], cached_[gen.below(i + 1)]);
  cached_epoch_ = epoch;
  return cached_;
}

std::vector<std::size_t> epoch_sampler::batch(std::int64_t step) {
  if (step < 1) throw value_error("epoch_sampler: step " + std::to_string(step) + " (steps count from 1)");
  std::vector<std::size_t> out;
  out.reserve(batch_);
  const auto n = static_cast<std::uint64_t>(examples_);
  for (std::uint64_t p = static_cast<std::uint64_t>(step - 1) * batch_; out.size() < batch_; ++p)
    out.push_back(order(static_cast<std::int64_t>(p / n))[p % n]);
  return out;
}

}  // namespace loom
