// param_store<T>: named trainable tensors and their gradients.
#pragma once

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

  /// Adds or replaces a parameter; its gradient is reset to zeros of the same shape.
  tensor<T>& set(std::string name, tensor<T> value) {
    entry& e = entries_[std::move(name)];
    e.grad = tensor<T>(value.dims());
    e.value = std::move(value);
    return e.value;
  }
  bool contains(std::string_view name) const { return entries_.find(name) != entries_.end(); }
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
  std::map<std::string, entry, std::less<>> entries_;
};

}  // namespace loom
