// Fusion rules: patterns of ops that run faster as one node. The rules live here, beside the
// kernels they need, and are the only place that knows which ops make a pattern; the plan
// rewrite (graph/rewrite.hpp) applies them without knowing any op. Private to the library.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "loom/core/op_entry.hpp"
#include "loom/graph/plan.hpp"

namespace loom::ops {

/// A fusion found by a rule: node `root` of the plan is replaced by one node of op `op` (an
/// op_entry with `fused` set) whose inputs are `inputs` (nodes of the plan) and whose value is
/// root's; the nodes in `absorbed` (the pattern's interior, read by nobody else) disappear.
struct fusion {
  const op_entry* op = nullptr;
  int root = -1;
  std::vector<int> inputs;
  std::vector<int> absorbed;
  std::shared_ptr<const void> params;  // what the fused kernels read (op_args::fused)
};

/// A rule: the fusion whose root is node `root`, if the pattern is there. A rule may absorb a
/// node only when `absorbable[node]` (not an output, not named, not kept) and every consumer
/// of that node is in the pattern.
using fusion_rule = std::optional<fusion> (*)(const plan_view& plan, int root, std::span<const std::uint8_t> absorbable);

/// Every rule, in the order they are tried on each node (ops/fusions.cpp).
std::span<const fusion_rule> fusion_rules();

/// Node x is read by node `by` only (once), and the rewrite lets a rule absorb it.
inline bool only_for(const plan_view& p, std::span<const std::uint8_t> absorbable, int x, int by) {
  auto cons = p.consumers(x);
  return absorbable[x] && cons.size() == 1 && cons[0] == by;
}

/// Two dims of the plan are the same expression (constant and symbols).
inline bool same_dim(const plan_dim& a, const plan_dim& b) {
  if (a.constant != b.constant || a.n_syms != b.n_syms) return false;
  for (int s = 0; s < a.n_syms; ++s)
    if (a.sym[s] != b.sym[s]) return false;
  return true;
}

/// Nodes a and b have the same shape (rank and every dim).
inline bool same_dims(const plan_view& p, int a, int b) {
  if (p.order[a]->rank != p.order[b]->rank) return false;
  for (int k = 0; k < p.order[a]->rank; ++k)
    if (!same_dim(p.dims[a][k], p.dims[b][k])) return false;
  return true;
}

}  // namespace loom::ops
