#include "loom/data/windows.hpp"

#include <string>

#include "loom/core/errors.hpp"
#include "loom/core/random.hpp"

namespace loom {

window_batcher::window_batcher(std::vector<int> ids, std::int64_t window) : ids_(std::move(ids)), window_(window) {
  if (window < 1) throw value_error("window_batcher: the window must be at least 1, got " + std::to_string(window));
  if (static_cast<std::int64_t>(ids_.size()) < window + 1)
    throw value_error("window_batcher: a sequence of " + std::to_string(ids_.size()) + " ids is too short for windows of " +
                      std::to_string(window) + " tokens and their targets (" + std::to_string(window + 1) + " ids)");
}

lm_batch window_batcher::at(std::span<const std::int64_t> offsets) const {
  const auto b = static_cast<std::int64_t>(offsets.size());
  lm_batch r{tensor<std::int32_t>(dims_t{b, window_}), tensor<std::int32_t>(dims_t{b, window_})};
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t t = 0; t < window_; ++t) {
      const auto at = static_cast<std::size_t>(offsets[static_cast<std::size_t>(i)] + t);
      r.tokens[i * window_ + t] = ids_[at];
      r.target[i * window_ + t] = ids_[at + 1];
    }
  return r;
}

lm_batch window_batcher::random(std::int64_t step, std::int64_t size, std::uint64_t seed) const {
  if (size < 1) throw value_error("window_batcher: a batch needs at least one window, got " + std::to_string(size));
  rng gen(seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(step));
  const auto starts = static_cast<std::uint64_t>(static_cast<std::int64_t>(ids_.size()) - window_);  // offsets 0 .. size − window − 1
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(size));
  for (auto& o : offsets) o = static_cast<std::int64_t>(gen.below(starts));
  return at(offsets);
}

lm_batch window_batcher::consecutive(std::int64_t first, std::int64_t count) const {
  if (count < 1) throw value_error("window_batcher: a batch needs at least one window, got " + std::to_string(count));
  const std::int64_t n = windows();
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) offsets[static_cast<std::size_t>(i)] = (((first + i) % n) + n) % n * window_;
  return at(offsets);
}

}  // namespace loom
