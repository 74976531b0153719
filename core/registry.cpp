// The list of ops a program declares (each op_def registers itself at start-up), the check
// that their ids (hashes of their names) are unique, and the test seam of core/registry.hpp.
#include "registry.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/errors.hpp"
#include "loom/core/node.hpp"

namespace loom {
namespace {
struct registry {
  std::mutex lock;
  std::vector<detail::entry_getter> pending;  // registered, not yet resolved
  std::vector<const op_entry*> ops;
  std::size_t checked = 0;  // ops[0, checked) were found free of collisions
};
registry& the_registry() {
  static registry r;
  return r;
}
std::vector<std::pair<const op_entry*, kernel_fn<double>>>& backward_overrides() {
  static std::vector<std::pair<const op_entry*, kernel_fn<double>>> overrides;
  return overrides;
}

[[noreturn]] void collision(const op_entry& a, const op_entry& b) {
  if (a.name == b.name)
    throw error("two different ops are named \"" + std::string(a.name) +
                "\": an op's name is its identity (its id is a hash of it), so each op needs a name of its own");
  throw error("ops \"" + std::string(a.name) + "\" and \"" + std::string(b.name) +
              "\" have the same id (a collision of their names' hashes): rename one of them");
}

// Moves pending registrations into the list; the caller holds the lock.
void resolve_pending(registry& r) {
  for (detail::entry_getter get : r.pending) {
    const op_entry* e = get();
    if (std::find(r.ops.begin(), r.ops.end(), e) == r.ops.end()) r.ops.push_back(e);
  }
  r.pending.clear();
}
}  // namespace

const std::vector<const op_entry*>& registered_ops() {
  registry& r = the_registry();
  {
    std::lock_guard guard(r.lock);
    resolve_pending(r);
  }
  detail::check_op_ids();
  return r.ops;
}

namespace detail {
op_registration::op_registration(entry_getter entry) {
  registry& r = the_registry();
  std::lock_guard guard(r.lock);
  r.pending.push_back(entry);
}

void check_op_ids() {
  registry& r = the_registry();
  std::lock_guard guard(r.lock);
  resolve_pending(r);
  if (r.checked == r.ops.size()) return;
  std::vector<const op_entry*> all = r.ops;
  all.push_back(&input_entry);
  all.push_back(&param_entry);
  std::sort(all.begin(), all.end(), [](const op_entry* a, const op_entry* b) { return a->id < b->id; });
  for (std::size_t i = 1; i < all.size(); ++i)
    if (all[i]->id == all[i - 1]->id) collision(*all[i - 1], *all[i]);
  r.checked = r.ops.size();
}

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

}  // namespace detail
}  // namespace loom
