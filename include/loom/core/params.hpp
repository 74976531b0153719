// param_store<T>: named trainable tensors and their gradients.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/errors.hpp"
#include "loom/core/tensor.hpp"

namespace loom {

/// Parameters by name (PyTorch state_dict keys where a layer mirrors a PyTorch module), each
/// with a gradient of the same shape. Iteration is in name order, so it is deterministic.
/// The executor looks parameters up by name at every forward(), so replacing a value (say,
/// after loading a checkpoint) is seen by the next step.
template <class T>
class param_store {
 public:
  struct entry {
    tensor<T> value;
    tensor<T> grad;
  };

  param_store() = default;
  param_store(const param_store& o) : entries_(o.entries_) {}
  param_store(param_store&& o) noexcept : entries_(std::move(o.entries_)) { o.version_ = next_version(); }
  param_store& operator=(const param_store& o) {
    entries_ = o.entries_;
    version_ = next_version();
    return *this;
  }
  param_store& operator=(param_store&& o) noexcept {
    entries_ = std::move(o.entries_);
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
    for (auto& [name, e] : entries_) e.grad.fill(T(0));
  }
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
  std::map<std::string, entry, std::less<>> entries_;
  std::uint64_t version_ = next_version();
};

}  // namespace loom
