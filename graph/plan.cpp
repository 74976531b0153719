// The run-time helpers of plan_view: lookups and text for messages and Graphviz output.
#include <string>

#include "loom/graph/plan.hpp"

namespace loom {

int plan_view::input_index(std::string_view name) const {
  for (int i = 0; i < size(); ++i)
    if (order[static_cast<std::size_t>(i)]->op->role == node_role::input && order[static_cast<std::size_t>(i)]->name == name)
      return i;
  return -1;
}

int plan_view::named_index(std::string_view name) const {
  for (int i : named)
    if (order[static_cast<std::size_t>(i)]->name == name) return i;
  return -1;
}

bool plan_view::is_state(int node) const {
  const node_desc* d = order[static_cast<std::size_t>(node)];
  return d->op->is_named_output && input_index(d->name) >= 0;
}

std::string plan_view::shape_text(int i) const {
  std::string r = "[";
  const auto& node_dims = dims[static_cast<std::size_t>(i)];
  for (int a = 0; a < order[static_cast<std::size_t>(i)]->rank; ++a) {
    const plan_dim& d = node_dims[static_cast<std::size_t>(a)];
    r += a ? ", " : "";
    for (int k = 0; k < d.n_syms; ++k) r += (k ? " + " : "") + std::string(syms[static_cast<std::size_t>(d.sym[k])]);
    if (d.constant != 0 || d.n_syms == 0) r += (d.n_syms ? " + " : "") + std::to_string(d.constant);
  }
  return r + "]";
}

std::string plan_view::describe(int i) const {
  const node_desc* d = order[static_cast<std::size_t>(i)];
  if (d->op->role == node_role::input) return "input \"" + std::string(d->name) + "\"";
  if (d->op->role == node_role::param) return "parameter \"" + std::string(d->name) + "\"";
  if (d->op->is_named_output) return "output \"" + std::string(d->name) + "\" (node " + std::to_string(i) + ")";
  return std::string(d->op->name) + " (node " + std::to_string(i) + ")";
}

}  // namespace loom
