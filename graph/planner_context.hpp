// The memory planner's working state, shared by its rooms: planner.cpp (values, in place,
// gradients), recompute.cpp (blocks recomputed in backward), placement.cpp (lifetimes,
// conflicts, offsets). Private to the executor.
#pragma once

#include <cstdint>
#include <vector>

#include "planner.hpp"

namespace loom::detail {

/// Tasks reachable from each task along a DAG's edges (bit b of row a: a happens-before b).
struct reachability {
  std::size_t words = 0;
  std::vector<std::uint64_t> bits;
  bool reaches(int a, int b) const { return (bits[static_cast<std::size_t>(a) * words + b / 64] >> (b % 64)) & 1u; }
};
reachability reach_of(const dag& g);

/// One access of a buffer: at a step, by a forward or a backward task (or by neither: the
/// steps before a pass, and the end).
struct access {
  int buf, step, fwd_task, bwd_task;
};

/// The plan being built: its buffers, every access so far, and the step numbering of
/// planner.hpp.
struct plan_context {
  const planner_input& in;
  const plan_view& plan;
  int n;
  int pre_forward = 0, pre_backward, end;
  buffer_plan bp;
  std::vector<access> events;
  std::vector<std::uint8_t> pinned_node;  // lives to the end: outputs, named and kept nodes

  explicit plan_context(const planner_input& input)
      : in(input), plan(*input.plan), n(input.plan->size()), pre_backward(n + 1), end(3 * n + 3) {}
  int fstep(int i) const { return 1 + i; }
  int bstep(int i) const { return n + 2 + 2 * (n - 1 - i); }
  bool runs_backward(int c) const { return !in.inference && !in.leaf[c] && in.needs_grad[c]; }
  int root(int i) const {
    while (in.view_of[i] >= 0) i = in.view_of[i];
    return i;
  }
  void touch(int b, int step, int fwd_task, int bwd_task) {
    if (b >= 0) events.push_back({b, step, fwd_task, bwd_task});
  }
  int new_buffer(int node, bool grad) {
    planned_buffer b;
    b.node = node;
    b.grad = grad;
    bp.buffers.push_back(b);
    return static_cast<int>(bp.buffers.size()) - 1;
  }
};

/// Blocks closed by checkpoint nodes: second buffers and one recomputation task each.
void plan_recompute(plan_context& c);
/// Lifetimes from the accesses, then which buffers may not share bytes.
void plan_conflicts(plan_context& c, const reachability& fwd_reach);

}  // namespace loom::detail
