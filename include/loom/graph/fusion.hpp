// Fusion rules: patterns of ops that run faster as one node, applied by the executor as a plan
// rewrite. The user writes primitives; a rule finds its pattern in the plan and replaces it by a
// node of a fused op (an op declared with op_traits::fused, whose kernels read the rule's
// parameters from op_args::fused). The library's own rules (the blocked attention, linear with
// its bias, activation or residual in the GEMM's epilogue, a head's product with its
// cross-entropy loss in row chunks) are registered through this same
// interface; a project adds its own with add_fusion_rule. The unfused plan stays the reference:
// exec_options::fuse = false (or LOOM_FUSE=0) runs the graph as written.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "loom/core/op_entry.hpp"
#include "loom/graph/plan.hpp"

namespace loom {

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

/// A rule's matcher: the fusion whose root is node `root` of `plan`, if the pattern is there.
/// It may absorb a node only when `absorbable[node]` (not an output, not named, not kept) and
/// every consumer of that node is in the pattern (only_for below checks both for one edge).
using fusion_match = std::optional<fusion> (*)(const plan_view& plan, int root, std::span<const std::uint8_t> absorbable);

/// A named rule. Rules are tried on each node from the outputs down, in ascending priority
/// (then name); the first that matches wins, and a node absorbed by one pattern is never part
/// of another. The library's rules have priorities 100 (attention), 200 (linear) and 300
/// (linear_cross_entropy: a head and its loss): a rule with a lower priority is tried before them.
struct fusion_rule {
  std::string_view name;  // must outlive the program's executors (a literal)
  fusion_match match = nullptr;
  int priority = 0;
};

/// Adds `rule` for every executor constructed afterwards (executors already made keep their
/// plan). Throws loom::error if a rule of the same name exists or `match` is null. Thread-safe.
void add_fusion_rule(const fusion_rule& rule);

/// Every rule, the library's included, in the order they are tried.
std::vector<fusion_rule> fusion_rules();

/// Node x is read by node `by` only (once), and the rewrite lets a rule absorb it.
inline bool only_for(const plan_view& p, std::span<const std::uint8_t> absorbable, int x, int by) {
  auto cons = p.consumers(x);
  return absorbable[x] && cons.size() == 1 && cons[0] == by;
}

// same_dim and same_dims (two dims, two nodes' shapes alike) are in loom/graph/plan.hpp.

}  // namespace loom

namespace loom::ops {  // the library's rules name these unqualified
using loom::fusion;
using loom::fusion_match;
using loom::only_for;
using loom::same_dim;
using loom::same_dims;
}  // namespace loom::ops
