// The memory planner: which arena buffers a plan needs, when each is alive, which may share
// bytes, and where each goes for the bound dims. Private to the library (the public report is
// include/loom/graph/memory_plan.hpp).
//
// Steps: one serial order of a training step — 0: before forward (strided feeds copied), 1 + i:
// forward of node i, n + 1: before backward (outputs' gradients seeded), n + 2 + 2(n − 1 − i):
// backward of node i (descending index, as the backward DAG orders contributions), one step
// later: the recomputation of the block that checkpoint node i closes, 3n + 3: the end (what
// the user may read afterwards). A buffer lives from its first write to its last
// access. Two buffers may share bytes when their lifetimes are disjoint *and* every access of the
// earlier one happens-before the later one's first write in the task DAG of that pass (forward
// and backward are separate passes, so across them order is given): sharing never adds an edge
// to the DAG, so it costs no concurrency.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loom/graph/plan.hpp"
#include "schedule.hpp"

namespace loom::detail {

struct planned_buffer {
  int node = -1;            // the node whose dims give its size
  bool grad = false;        // a gradient (else a value)
  bool saved = false;       // what the node's forward saves for its backward (op_entry::saved_elements)
  bool scratch = false;     // the node's backward workspace (op_entry::scratch_elements)
  int first = 0, last = 0;  // steps of its first write and last access
  bool pinned = false;      // lives to the end: an output, a kept node, an input's gradient
  std::vector<int> fwd_tasks, bwd_tasks;  // nodes whose forward / backward task accesses it
};

/// What the planner needs to know about each node (fixed for an executor).
struct planner_input {
  const plan_view* plan = nullptr;
  schedules* sched = nullptr;  // recomputation adds tasks (numbered from n) to its backward DAG
  std::span<const std::uint8_t> leaf, needs_grad, keep;
  std::span<const int> view_of;               // views: the node whose buffer they share, else −1
  std::span<const std::uint8_t> grad_view;    // views that share their input's gradient too
  bool inference = false;                     // no backward: values die after their last reader
  bool keep_all = false;                      // no sharing at all (debugging)
  bool recompute = false;                     // recompute blocks closed by checkpoint nodes
};

/// Buffers, per-node assignment and the conflict relation of a plan (dims-independent).
struct buffer_plan {
  std::vector<planned_buffer> buffers;
  std::vector<int> val_buf, grad_buf;     // per node: its buffer, or −1 (parameters, fed inputs)
  std::vector<int> saved_buf;             // per node: its saved buffer (op_entry::saved_elements), or −1
  std::vector<int> scratch_buf;           // per node: its backward workspace (op_entry::scratch_elements), or −1
  std::vector<std::uint8_t> value_kept;   // per node: its value is readable after the step
  std::vector<std::uint8_t> grad_kept;    // per node: its gradient is readable after backward
  std::vector<int> in_place_of;           // per node: the input whose buffer it overwrites, or −1
  std::vector<int> val_buf_bwd;           // per node: its buffer in backward when recomputed, or −1
  std::vector<std::vector<int>> recompute;  // per recompute task n + s: the nodes it runs forward, in order
  std::vector<std::uint64_t> conflict;    // bit matrix: buffers that may not share bytes
  std::size_t words = 0;                  // 64-bit words per row of `conflict`

  bool conflicts(int a, int b) const { return (conflict[static_cast<std::size_t>(a) * words + b / 64] >> (b % 64)) & 1u; }
};

/// Buffers, lifetimes and conflicts of a plan (once per executor; O(buffers² · accesses)).
/// Adds the recomputation tasks, if any, to in.sched's backward DAG.
buffer_plan plan_buffers(const planner_input& in);

/// Offsets (in elements, 16-element aligned) for buffers of the given sizes: largest first,
/// each at the lowest offset that overlaps no conflicting buffer placed before it (greedy by
/// size, as TFLite's and XLA's heap simulators). Returns the arena's size in elements.
std::int64_t place_buffers(const buffer_plan& bp, std::span<const std::int64_t> sizes,
                           std::vector<std::int64_t>& offsets);

}  // namespace loom::detail
