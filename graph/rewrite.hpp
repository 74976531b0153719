// The plan rewrite: a plan with the fusion rules of loom/graph/fusion.hpp applied — the patterns
// they find replaced by fused nodes — as a plan_view of its own. The unfused plan stays the
// reference (exec_options::fuse = false runs it as written). Private to the executor.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "loom/graph/plan.hpp"

namespace loom::detail {

/// A rewritten plan and how its nodes relate to the original's.
struct rewritten_plan {
  std::vector<const node_desc*> order;
  std::vector<int> in_off, in_idx, out_off, out_idx, roots, named;
  std::vector<plan_dims> dims;
  std::vector<std::uint8_t> from_param, from_input;
  std::deque<node_desc> made;                          // the fused nodes' descriptors
  std::deque<std::vector<const node_desc*>> made_inputs;
  std::vector<std::shared_ptr<const void>> params;     // per node: its fusion's parameters (node_desc::fused), or null
  std::vector<int> of_original;                        // original node -> its node here, or −1 (absorbed)
  std::vector<int> absorbed_into;                      // original node -> the fused node that absorbed it, or −1
  std::vector<int> to_original;                        // node here -> its original (a fused node: its root)
  plan_view view;                                      // over the arrays above
  int fused = 0;                                       // number of fused nodes

  rewritten_plan() = default;
  rewritten_plan(const rewritten_plan&) = delete;
  rewritten_plan& operator=(const rewritten_plan&) = delete;
  rewritten_plan(rewritten_plan&&) = default;
  rewritten_plan& operator=(rewritten_plan&&) = default;
};

/// `plan` with every fusion the rules find, except that no node marked in `keep` (nor an
/// output or a named node) is absorbed. With `fuse` false, the same plan, node for node.
std::unique_ptr<rewritten_plan> rewrite(const plan_view& plan, std::span<const std::uint8_t> keep, bool fuse);

}  // namespace loom::detail
