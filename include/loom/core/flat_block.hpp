// flat_block<T>: tensors laid out one after another in one 64-byte aligned block.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "loom/core/tensor.hpp"

namespace loom {

/// One allocation holding a sequence of tensors, each starting on a 64-byte boundary (so a
/// GEMM reads them aligned), with zeros in the gaps. param_store keeps its parameters and
/// their gradients this way, and the optimizers their buffers, all with the same layout, so
/// that one update is one pass over a few long arrays instead of a walk over many tensors.
template <class T>
class flat_block {
 public:
  /// A tensor's elements inside the block: [offset, offset + size).
  struct segment {
    std::int64_t offset, size;
  };

  /// Whether the tensors `ts` yields (pointers, in order) are exactly this block's: as many as
  /// its segments, each in the block at its segment's offset with its segment's size.
  template <class Range>
  bool holds(const Range& ts) const {
    std::size_t k = 0;
    for (const tensor<T>* t : ts) {
      if (k == segments_.size() || t->size() != segments_[k].size || !t->in_block() ||
          t->data() != base() + segments_[k].offset)
        return false;
      ++k;
    }
    return k == segments_.size();
  }
  /// Copies the tensors `ts` yields (pointers, in order) into a new block and makes each a
  /// tensor in it (tensor::move_into). With `shapes` (one per tensor), each takes that shape: a
  /// tensor of that shape is moved in, any other (say, a new empty one) becomes zeros of that
  /// shape in the block, with no allocation of its own. On failure (no memory) nothing has
  /// changed.
  template <class Range>
  void pack(const Range& ts, std::span<const dims_t> shapes = {}) {
    std::vector<segment> segments;
    std::int64_t total = 0;
    std::size_t k = 0;
    for (const tensor<T>* t : ts) {
      const std::int64_t n = shapes.empty() ? t->size() : shapes[k].size();
      segments.push_back({total, n});
      total = round_up(total + n);
      ++k;
    }
    std::shared_ptr<T> block = allocate(total);  // the only step that may fail
    k = 0;
    for (tensor<T>* t : ts) {
      std::shared_ptr<T> slot(block, block.get() + segments[k].offset);
      if (shapes.empty() || t->dims() == shapes[k])
        t->move_into(std::move(slot));
      else
        *t = tensor<T>::in_block(shapes[k], std::move(slot));
      ++k;
    }
    block_ = std::move(block);
    segments_ = std::move(segments);
    size_ = total;
  }
  /// Forgets the layout (the tensors keep the block alive as long as they are in it).
  void reset() noexcept {
    block_.reset();
    segments_.clear();
    size_ = 0;
  }

  /// The block's elements, gaps included (they stay zero unless written through data()).
  std::span<T> elements() const { return {block_.get(), static_cast<std::size_t>(size_)}; }
  std::span<const segment> segments() const { return segments_; }
  bool empty() const { return segments_.empty(); }

  /// Elements per 64 bytes: each segment starts at a multiple of it.
  static constexpr std::int64_t align = 64 / static_cast<std::int64_t>(sizeof(T)) > 0 ? 64 / sizeof(T) : 1;

 private:
  static std::int64_t round_up(std::int64_t n) { return (n + align - 1) / align * align; }
  static std::shared_ptr<T> allocate(std::int64_t n) {
    aligned_allocator<T> a;
    T* p = a.allocate(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
    std::shared_ptr<T> block(p, [a](T* q) mutable { a.deallocate(q, 0); });
    std::fill(p, p + n, T(0));
    return block;
  }
  T* base() const { return block_.get(); }

  std::shared_ptr<T> block_;
  std::vector<segment> segments_;
  std::int64_t size_ = 0;
};

}  // namespace loom
