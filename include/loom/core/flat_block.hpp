// flat_block<T>: tensors laid out one after another in one 64-byte aligned block.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <utility>
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

  flat_block() = default;
  /// A moved-from block is empty (no segments, no elements), like a new one.
  flat_block(flat_block&& o) noexcept : block_(std::move(o.block_)), segments_(std::exchange(o.segments_, {})) {}
  flat_block& operator=(flat_block&& o) noexcept {
    block_ = std::move(o.block_);
    segments_ = std::exchange(o.segments_, {});
    return *this;
  }

  /// Whether `t` is segment k's tensor: in the block at its offset, with its size.
  bool holds(std::size_t k, const tensor<T>& t) const {
    return k < segments_.size() && t.in_block() && t.size() == segments_[k].size &&
           t.data() == block_.get() + segments_[k].offset;
  }
  /// Whether the tensors `ts` yields (pointers, in order) are exactly this block's: one per
  /// segment, each held (above).
  template <class Range>
  bool holds(const Range& ts) const {
    std::size_t k = 0;
    for (const tensor<T>* t : ts)
      if (!holds(k++, *t)) return false;
    return k == segments_.size();
  }
  /// Copies the tensors `ts` yields (pointers, in order) into a new block and makes each a
  /// tensor in it (tensor::move_into). With `shapes` (one per tensor), each takes that shape: a
  /// tensor of that shape is moved in, any other (say, a new empty one) becomes zeros of that
  /// shape in the block, with no allocation of its own. On failure (no memory) nothing has
  /// changed.
  template <class Range>
  void pack(const Range& ts, std::span<const dims_t> shapes = {}) {
    std::vector<std::int64_t> sizes;
    std::size_t k = 0;
    for (const tensor<T>* t : ts) {
      sizes.push_back(shapes.empty() ? t->size() : shapes[k].size());
      ++k;
    }
    std::vector<segment> segments = lay_out(sizes);
    std::shared_ptr<T> block = allocate(segments.empty() ? 0 : next_offset(segments.back().offset + segments.back().size));
    k = 0;  // the allocation was the only step that may fail
    for (tensor<T>* t : ts) {
      std::shared_ptr<T> slot(block, block.get() + segments[k].offset);
      if (shapes.empty() || t->dims() == shapes[k])
        t->move_into(std::move(slot));
      else
        t->reseat(tensor<T>::placed(shapes[k], std::move(slot)));
      ++k;
    }
    block_ = std::move(block);
    segments_ = std::move(segments);
  }
  /// Forgets the layout (the tensors keep the block alive as long as they are in it).
  void reset() noexcept {
    block_.reset();
    segments_.clear();
  }

  /// The block's elements up to the end of its last segment, gaps included (they stay zero
  /// unless written through data()); empty when the block has no segments.
  std::span<T> elements() const {
    if (segments_.empty()) return {};
    return {block_.get(), static_cast<std::size_t>(segments_.back().offset + segments_.back().size)};
  }
  std::span<const segment> segments() const { return segments_; }
  bool empty() const { return segments_.empty(); }

  /// Where pack() starts the segment after one that ends at `end`: the first multiple of
  /// `align` from `end` on. (The optimizers lay their buffers out by the same rule.)
  static std::int64_t next_offset(std::int64_t end) { return (end + align - 1) / align * align; }
  /// The segments pack() makes for tensors of these sizes, in order.
  static std::vector<segment> lay_out(std::span<const std::int64_t> sizes) {
    std::vector<segment> segments;
    segments.reserve(sizes.size());
    std::int64_t total = 0;
    for (std::int64_t n : sizes) {
      segments.push_back({total, n});
      total = next_offset(total + n);
    }
    return segments;
  }

  /// Elements per 64 bytes: each segment starts at a multiple of it.
  static constexpr std::int64_t align = 64 / static_cast<std::int64_t>(sizeof(T)) > 0 ? 64 / sizeof(T) : 1;

 private:
  static std::shared_ptr<T> allocate(std::int64_t n) {
    aligned_allocator<T> a;
    T* p = a.allocate(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
    std::shared_ptr<T> block(p, [a](T* q) mutable { a.deallocate(q, 0); });
    std::fill(p, p + n, T(0));
    return block;
  }
  std::shared_ptr<T> block_;
  std::vector<segment> segments_;
};

}  // namespace loom
