// param_store<T>: named trainable tensors and their gradients.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/errors.hpp"
#include "loom/core/flat_block.hpp"
#include "loom/core/tensor.hpp"

namespace loom {

/// Parameters by name (PyTorch state_dict keys where a layer mirrors a PyTorch module), each
/// with a gradient of the same shape. Iteration is in name order, so it is deterministic.
///
/// Where the elements live. Every value and gradient is a tensor in a block (tensor::in_block),
/// so it keeps its address and its shape: assigning a tensor of the same shape writes into it,
/// another shape is refused. Only these calls change the store's layout (where the elements
/// are), and each changes layout_version():
///   - set() of a new name, or of another shape than the parameter has;
///   - add_zeros() (make_params: it packs the store, see pack());
///   - pack() of a store that is not packed;
///   - assigning a whole store to this one (a copy is packed; a move takes the other's blocks).
/// Nothing else in loom changes the layout. make_params makes the store packed, and the
/// optimizers, data-parallel training and the checkpoint loaders work on the layout they find
/// (loading writes the values into their places). An executor finds its parameters by name
/// when it first binds and again only after a layout change, which it refuses between a
/// forward() and its backward() (call forward() again).
template <class T>
class param_store {
 public:
  struct entry {
    tensor<T> value;
    tensor<T> grad;
  };

  param_store() = default;
  /// A packed copy with values and gradients of its own.
  param_store(const param_store& o) {
    std::vector<dims_t> shapes;
    shapes.reserve(o.entries_.size());
    for (const auto& [name, e] : o.entries_) {
      entries_.try_emplace(entries_.end(), name);  // empty tensors until packed
      shapes.push_back(e.value.dims());
    }
    pack_blocks(shapes);
    auto it = entries_.begin();
    for (const auto& [name, e] : o.entries_) {
      std::copy(e.value.values().begin(), e.value.values().end(), it->second.value.data());
      std::copy(e.grad.values().begin(), e.grad.values().end(), it->second.grad.data());
      ++it;
    }
  }
  /// Takes o's parameters where they are; o is left empty (a layout change for both).
  param_store(param_store&& o) noexcept
      : entries_(std::move(o.entries_)), values_(std::move(o.values_)), grads_(std::move(o.grads_)) {
    o.entries_.clear();
    o.version_ = next_version();
  }
  /// Becomes a packed copy of o (on failure, *this is unchanged).
  param_store& operator=(const param_store& o) {
    if (this != &o) *this = param_store(o);
    return *this;
  }
  param_store& operator=(param_store&& o) noexcept {
    if (this == &o) return *this;
    entries_ = std::move(o.entries_);
    o.entries_.clear();
    values_ = std::move(o.values_);  // a moved-from flat_block is empty
    grads_ = std::move(o.grads_);
    version_ = next_version();
    o.version_ = next_version();
    return *this;
  }

  /// Sets a parameter's value and its gradient to zeros. For a parameter of the same shape,
  /// the value is written into its place (no layout change: an executor goes on reading it).
  /// A new name, or another shape, gives the parameter a block of its own, the value's elements
  /// copied there (a layout change; the store is then not packed()). On failure (no memory)
  /// the store is unchanged.
  tensor<T>& set(std::string name, tensor<T> value) {
    if (entry* e = find(name); e && e->value.dims() == value.dims()) {
      e->value = std::move(value);  // into its slot
      e->grad.fill(T(0));
      return e->value;
    }
    entry placed;  // both in one new block: the value moved in, the gradient zeros
    placed.value = std::move(value);
    {
      const dims_t shape = placed.value.dims();
      const std::array<dims_t, 2> shapes{shape, shape};
      flat_block<T> block;
      block.pack(std::array<tensor<T>*, 2>{&placed.value, &placed.grad}, shapes);
    }  // the tensors keep their block alive
    entry& e = entries_[std::move(name)];
    e.value.reseat(std::move(placed.value));
    e.grad.reseat(std::move(placed.grad));
    version_ = next_version();
    return e.value;
  }
  /// Adds zero-filled parameters (with zero gradients) under names not yet in the store and
  /// packs the store (see pack), making each new value and gradient directly in the blocks:
  /// no tensor of its own first, so the store's memory is never held twice (make_params uses
  /// it). A layout change. Throws value_error (changing nothing) if a name is already in the
  /// store or given twice.
  void add_zeros(std::span<const std::pair<std::string, dims_t>> added) {
    std::vector<const std::pair<std::string, dims_t>*> by_name;  // `added` in name order
    for (const auto& a : added) by_name.push_back(&a);
    std::sort(by_name.begin(), by_name.end(), [](auto* a, auto* b) { return a->first < b->first; });
    for (std::size_t k = 0; k < by_name.size(); ++k)
      if (contains(by_name[k]->first) || (k > 0 && by_name[k - 1]->first == by_name[k]->first))
        throw value_error("param_store: parameter \"" + by_name[k]->first + "\" is already there");
    for (const auto& [name, dims] : added) entries_.try_emplace(name);  // empty tensors until packed
    version_ = next_version();
    try {
      std::vector<dims_t> shapes;
      shapes.reserve(entries_.size());
      std::size_t k = 0;  // both in name order: one walk over each
      for (const auto& [name, e] : entries_) {
        const bool is_new = k < by_name.size() && by_name[k]->first == name;
        shapes.push_back(is_new ? by_name[k++]->second : e.value.dims());
      }
      pack_blocks(shapes);  // existing tensors move in, new ones are zeros in place
    } catch (...) {
      for (const auto& [name, dims] : added) entries_.erase(name);
      throw;
    }
  }
  bool contains(std::string_view name) const { return entries_.find(name) != entries_.end(); }
  /// The entry of `name`, or null when absent. Its address stays valid while layout_version()
  /// is unchanged (the entries live in a map's nodes, which never move).
  entry* find(std::string_view name) {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  const entry* find(std::string_view name) const { return const_cast<param_store*>(this)->find(name); }
  /// Changes with every layout change (see the class comment): a name added, a parameter
  /// reshaped, the store packed, copied or moved into (or moved from). An executor keeps the
  /// entries it found by name and the addresses it bound, and looks them up again only when
  /// this changes. Unique across stores.
  std::uint64_t layout_version() const { return version_; }
  /// The parameter's value; throws missing_error naming it if absent.
  tensor<T>& value(std::string_view name) { return get(name).value; }
  const tensor<T>& value(std::string_view name) const { return get(name).value; }
  /// The parameter's gradient (written by executor::backward); throws missing_error if absent.
  tensor<T>& grad(std::string_view name) { return get(name).grad; }
  const tensor<T>& grad(std::string_view name) const { return get(name).grad; }
  /// Sets every gradient to zero.
  void zero_grad() {
    if (packed()) {
      const std::span<T> all = grads_.elements();
      std::fill(all.begin(), all.end(), T(0));
      return;
    }
    for (auto& [name, e] : entries_) e.grad.fill(T(0));
  }

  /// Lays every value out in one block and every gradient in another, in name order, each
  /// tensor on a 64-byte boundary and at the same offset in both blocks, unless they already
  /// are (packed()). Returns whether it moved them: a layout change, so an executor bound to
  /// the store binds again at its next forward() (and refuses a backward() before it). make_params
  /// makes a packed store; a store built with set() can be packed once, before any executor
  /// runs on it (data-parallel training needs a packed store). On failure (no memory) every
  /// tensor keeps its elements and its place.
  bool pack() {
    if (packed()) return false;
    pack_blocks({});
    version_ = next_version();
    return true;
  }
  /// Whether every value and gradient is where pack() put it.
  bool packed() const { return in_layout(values_, &entry::value) && in_layout(grads_, &entry::grad); }
  /// The blocks of a packed store: the values and the gradients, with the same segments (one
  /// per parameter, in name order). Meaningful only while packed().
  const flat_block<T>& value_block() const { return values_; }
  const flat_block<T>& grad_block() const { return grads_; }
  std::vector<std::string> names() const {
    std::vector<std::string> r;
    for (const auto& [name, e] : entries_) r.push_back(name);
    return r;
  }
  std::size_t size() const { return entries_.size(); }
  /// Total number of scalars over all parameters.
  std::int64_t numel() const {
    std::int64_t n = 0;
    for (const auto& [name, e] : entries_) n += e.value.size();
    return n;
  }
  auto begin() { return entries_.begin(); }
  auto end() { return entries_.end(); }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  entry& get(std::string_view name) {
    auto it = entries_.find(name);
    if (it == entries_.end()) throw missing_error("parameter \"" + std::string(name) + "\" is not in the store");
    return it->second;
  }
  const entry& get(std::string_view name) const { return const_cast<param_store*>(this)->get(name); }
  static std::uint64_t next_version() {
    static std::atomic<std::uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  // New blocks for the values and the gradients (flat_block::pack with these shapes, or each
  // tensor's own when empty), adopted once both are made. The caller changes version_.
  void pack_blocks(std::span<const dims_t> shapes) {
    flat_block<T> values, grads;
    values.pack(members(&entry::value), shapes);
    grads.pack(members(&entry::grad), shapes);
    values_ = std::move(values);
    grads_ = std::move(grads);
  }
  // Whether block b holds member m (value or grad) of every entry, in name order (no
  // allocation: zero_grad and every optimizer step ask).
  bool in_layout(const flat_block<T>& b, tensor<T> entry::*m) const {
    if (b.segments().size() != entries_.size()) return false;
    std::size_t k = 0;
    for (const auto& kv : entries_)
      if (!b.holds(k++, kv.second.*m)) return false;
    return true;
  }
  // Pointers to member m (value or grad) of every entry, in name order. A plain vector, not a
  // range adaptor over the map: clang 14 with libstdc++ 12 (the fuzz build) cannot compile those.
  std::vector<tensor<T>*> members(tensor<T> entry::*m) {
    std::vector<tensor<T>*> out;
    out.reserve(entries_.size());
    for (auto& kv : entries_) out.push_back(&(kv.second.*m));
    return out;
  }

  std::map<std::string, entry, std::less<>> entries_;
  flat_block<T> values_, grads_;  // where pack() put the values and gradients
  std::uint64_t version_ = next_version();
};

}  // namespace loom
