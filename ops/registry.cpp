// The list of ops a program includes (each op header registers its entry), and the test seam
// of ops/registry.hpp.
#include "registry.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace loom {
namespace {
std::vector<const op_entry*>& op_list() {
  static std::vector<const op_entry*> ops;
  return ops;
}
std::vector<std::pair<const op_entry*, kernel_fn<double>>>& backward_overrides() {
  static std::vector<std::pair<const op_entry*, kernel_fn<double>>> overrides;
  return overrides;
}
}  // namespace

const std::vector<const op_entry*>& registered_ops() { return op_list(); }

detail::op_registration::op_registration(const op_entry& op) {
  auto& ops = op_list();
  if (std::find(ops.begin(), ops.end(), &op) == ops.end()) ops.push_back(&op);
}

namespace ops {

template <class T>
op_kernels<T> kernels_for(const op_entry& op) {
  op_kernels<T> k = op.kernels<T>();
  if constexpr (std::is_same_v<T, double>)
    for (const auto& [target, backward] : backward_overrides())
      if (target == &op) k.backward = backward;
  return k;
}
template op_kernels<float> kernels_for<float>(const op_entry&);
template op_kernels<double> kernels_for<double>(const op_entry&);

void set_backward_override(const op_entry& op, kernel_fn<double> backward) {
  auto& overrides = backward_overrides();
  std::erase_if(overrides, [&](const auto& o) { return o.first == &op; });
  if (backward) overrides.emplace_back(&op, backward);
}

}  // namespace ops
}  // namespace loom
