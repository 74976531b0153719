// param_store<T>: named trainable tensors and their gradients.
#pragma once

#include <algorithm>
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
/// The executor looks parameters up by name at every forward(), so replacing a value (say,
/// after loading a checkpoint) is seen by the next step.
///
/// pack() (which the optimizers call) lays all values out in one block and all gradients in
/// another, so that an update is one pass over each. Assigning a tensor of the same shape to a
/// packed value or gradient writes into its place; any other change (a new name, a new
/// shape) leaves the store unpacked until the next pack().
template <class T>
class param_store {
 public:
  struct entry {
    tensor<T> value;
    tensor<T> grad;
  };

  param_store() = default;
  /// A copy has tensors of its own (unpacked).
  param_store(const param_store& o) : entries_(o.entries_) {}
  param_store(param_store&& o) noexcept
      : entries_(std::move(o.entries_)), values_(std::move(o.values_)), grads_(std::move(o.grads_)) {
    o.version_ = next_version();
  }
  param_store& operator=(const param_store& o) {
    if (this == &o) return *this;
    entries_ = o.entries_;
    values_.reset();
    grads_.reset();
    version_ = next_version();
    return *this;
  }
  param_store& operator=(param_store&& o) noexcept {
    if (this == &o) return *this;
    entries_ = std::move(o.entries_);
    values_ = std::move(o.values_);  // a moved-from flat_block is empty
    grads_ = std::move(o.grads_);
    version_ = next_version();
    o.version_ = next_version();
    return *this;
  }

  /// Adds or replaces a parameter; its gradient is reset to zeros of the same shape.
  tensor<T>& set(std::string name, tensor<T> value) {
    const auto [it, added] = entries_.try_emplace(std::move(name));
    if (added) version_ = next_version();
    entry& e = it->second;
    e.grad = tensor<T>(value.dims());
    e.value = std::move(value);
    return e.value;
  }
  /// Adds zero-filled parameters (with zero gradients) under names not yet in the store and
  /// packs the store (see pack), making each new value and gradient directly in the blocks:
  /// no tensor of its own first, so the store's memory is never held twice (make_params uses
  /// it). Throws value_error (changing nothing) if a name is already in the store or given
  /// twice. If some gradient's shape is not its value's, adds them unpacked, as set() would.
  void add_zeros(std::span<const std::pair<std::string, dims_t>> added) {
    std::vector<const std::pair<std::string, dims_t>*> by_name;  // `added` in name order
    for (const auto& a : added) by_name.push_back(&a);
    std::sort(by_name.begin(), by_name.end(), [](auto* a, auto* b) { return a->first < b->first; });
    for (std::size_t k = 0; k < by_name.size(); ++k)
      if (contains(by_name[k]->first) || (k > 0 && by_name[k - 1]->first == by_name[k]->first))
        throw value_error("param_store: parameter \"" + by_name[k]->first + "\" is already there");
    bool packable = true;
    for (const auto& [name, e] : entries_) packable = packable && e.grad.dims() == e.value.dims();
    if (!packable) {
      for (const auto& [name, dims] : added) set(name, tensor<T>(dims));
      return;
    }
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
  /// Changes whenever an entry may have been added or removed or have moved: a name added by
  /// set(), the store copied or moved into (or moved from). An executor keeps the entries it
  /// found by name and looks them up again only when this changes. Unique across stores.
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
  /// are (packed()). Returns whether it moved them: then their addresses changed, and an
  /// executor bound to the store binds again at its next forward() (between a forward() and
  /// its backward() it refuses, as for any replaced parameter). Leaves the store as it is if a
  /// gradient's shape is not its value's (the optimizers refuse such a store). On failure (no
  /// memory) every tensor keeps its elements, and the store may be left unpacked.
  bool pack() {
    if (packed()) return false;
    for (const auto& [name, e] : entries_)
      if (!(e.grad.dims() == e.value.dims())) return false;
    pack_blocks({});
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
  // tensor's own when empty), adopted once both are made.
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
