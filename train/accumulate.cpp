// Gradient accumulation in the tree order (include/loom/train/accumulate.hpp).
//
// push() works like a binary counter: the partial sums are complete subtrees of 1, 2, 4, ...
// micro-batches, largest (oldest) first; a new micro-batch is added to a top of one leaf, and
// two neighbours of equal size are merged, the older on the left. finish() then adds the
// remaining subtrees from the right: last = s_0 + (s_1 + (... + (s_top + last))). For K
// micro-batches this is exactly the tree sum[lo, hi) = sum[lo, m) + sum[m, hi).
#include "loom/train/accumulate.hpp"

#include <algorithm>

#include "loom/core/errors.hpp"

namespace loom {

namespace {

double tree_sum(std::span<const double> v, std::size_t lo, std::size_t hi) {
  if (hi - lo == 1) return v[lo];
  const std::size_t m = lo + static_cast<std::size_t>(tree_split(static_cast<std::int64_t>(hi - lo)));
  return tree_sum(v, lo, m) + tree_sum(v, m, hi);
}

}  // namespace

double tree_sum(std::span<const double> values) {
  return values.empty() ? 0.0 : tree_sum(values, 0, values.size());
}

template <class T>
gradient_accumulator<T>::gradient_accumulator(param_store<T>& params) : params_(&params) {
  clear();
}

template <class T>
void gradient_accumulator<T>::clear() {
  grads_.clear();
  offset_.clear();
  std::int64_t total = 0;
  for (auto& [name, e] : *params_) {
    grads_.push_back(&e.grad);
    offset_.push_back(total);
    total += e.grad.size();
  }
  offset_.push_back(total);
  for (auto& l : levels_) spare_.push_back(std::move(l));
  levels_.clear();
  pushed_ = 0;
}

template <class T>
void gradient_accumulator<T>::push() {
  const std::size_t n = grads_.size();
  if (!levels_.empty() && levels_.back().leaves == 1) {
    // a micro-batch next to a single one: their sum, the older on the left
    T* top = levels_.back().sum.data();
    for (std::size_t s = 0; s < n; ++s) {
      const T* g = grads_[s]->data();
      T* t = top + offset_[s];
      for (std::int64_t i = 0; i < grads_[s]->size(); ++i) t[i] = t[i] + g[i];
    }
    levels_.back().leaves = 2;
    // merge neighbours of equal size: a complete subtree
    while (levels_.size() >= 2 && levels_[levels_.size() - 2].leaves == levels_.back().leaves) {
      level& left = levels_[levels_.size() - 2];
      const level& right = levels_.back();
      for (std::size_t i = 0; i < left.sum.size(); ++i) left.sum[i] = left.sum[i] + right.sum[i];
      left.leaves *= 2;
      spare_.push_back(std::move(levels_.back()));
      levels_.pop_back();
    }
  } else {
    level l;
    if (!spare_.empty()) {
      l = std::move(spare_.back());
      spare_.pop_back();
    }
    l.leaves = 1;
    l.sum.resize(static_cast<std::size_t>(offset_.back()));
    for (std::size_t s = 0; s < n; ++s)
      std::copy(grads_[s]->data(), grads_[s]->data() + grads_[s]->size(), l.sum.begin() + offset_[s]);
    levels_.push_back(std::move(l));
  }
  ++pushed_;
}

template <class T>
void gradient_accumulator<T>::finish(std::size_t slot, std::int64_t divisor) {
  if (slot >= grads_.size())
    throw value_error("gradient_accumulator: slot " + std::to_string(slot) + " of " + std::to_string(grads_.size()));
  if (divisor < 1) throw value_error("gradient_accumulator: divisor " + std::to_string(divisor) + " is not positive");
  T* g = grads_[slot]->data();
  const std::int64_t size = grads_[slot]->size();
  for (auto l = levels_.rbegin(); l != levels_.rend(); ++l) {
    const T* partial = l->sum.data() + offset_[slot];
    for (std::int64_t i = 0; i < size; ++i) g[i] = partial[i] + g[i];
  }
  if (divisor != 1) {
    const T d = static_cast<T>(divisor);
    for (std::int64_t i = 0; i < size; ++i) g[i] = g[i] / d;
  }
}

template <class T>
void gradient_accumulator<T>::finish_all(std::int64_t divisor) {
  for (std::size_t s = 0; s < grads_.size(); ++s) finish(s, divisor);
}

template class gradient_accumulator<float>;
template class gradient_accumulator<double>;

}  // namespace loom
