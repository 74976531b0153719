// The memory planner (see planner.hpp): values, in place and gradients here; recomputation in
// recompute.cpp; lifetimes, conflicts and offsets in placement.cpp.
#include "planner.hpp"

#include <algorithm>

#include "planner_context.hpp"

namespace loom::detail {


buffer_plan plan_buffers(const planner_input& input) {
  plan_context c(input);
  const planner_input& in = c.in;
  const plan_view& plan = c.plan;
  const int n = c.n;
  const int pre_forward = c.pre_forward, pre_backward = c.pre_backward, end = c.end;
  auto fstep = [&](int i) { return c.fstep(i); };
  auto bstep = [&](int i) { return c.bstep(i); };
  auto root = [&](int i) { return c.root(i); };
  auto runs_backward = [&](int i) { return c.runs_backward(i); };
  auto touch = [&](int b, int step, int fwd_task, int bwd_task) { c.touch(b, step, fwd_task, bwd_task); };
  auto new_buffer = [&](int node, bool grad) { return c.new_buffer(node, grad); };
  buffer_plan& bp = c.bp;
  std::vector<access>& events = c.events;
  bp.val_buf.assign(n, -1);
  bp.grad_buf.assign(n, -1);
  bp.val_buf_bwd.assign(n, -1);
  bp.value_kept.assign(n, 0);
  bp.grad_kept.assign(n, 0);
  bp.in_place_of.assign(n, -1);
  bp.saved_buf.assign(n, -1);
  bp.scratch_buf.assign(n, -1);
  std::vector<std::uint8_t>& pinned_node = c.pinned_node;
  pinned_node.assign(n, 0);
  for (int r : plan.roots) pinned_node[r] = 1;
  for (int i : plan.named) pinned_node[i] = 1;  // readable by name after the step
  for (int i = 0; i < n; ++i) pinned_node[i] = pinned_node[i] || in.keep[i] || in.keep_all;

  // ---- values: one buffer per computed node (views share their input's); real inputs get one
  // too, used only when a strided feed must be copied (its size is then nonzero)
  for (int i = 0; i < n; ++i) {
    const node_desc& d = *plan.order[i];
    if (d.op->role == node_role::param) continue;
    if (d.op->role == node_role::input) {
      bp.val_buf[i] = new_buffer(i, false);
      touch(bp.val_buf[i], pre_forward, -1, -1);
    } else {
      bp.val_buf[i] = in.view_of[i] >= 0 ? bp.val_buf[root(i)] : new_buffer(i, false);
      touch(bp.val_buf[i], fstep(i), i, -1);
    }
  }
  for (int c = 0; c < n; ++c) {  // what node c's tasks read of its inputs' values and its own
    if (in.leaf[c]) continue;
    auto ins = plan.inputs(c);
    for (std::size_t k = 0; k < ins.size(); ++k) {
      touch(bp.val_buf[ins[k]], fstep(c), c, -1);
      if (runs_backward(c) && plan.order[c]->op->backward_reads_input(static_cast<int>(k)))
        touch(bp.val_buf[ins[k]], bstep(c), -1, c);
    }
    if (runs_backward(c) && plan.order[c]->op->backward_reads_output) touch(bp.val_buf[c], bstep(c), -1, c);
  }

  // ---- saved: what a node's forward writes for its own backward, alive from one to the other
  for (int i = 0; i < n; ++i) {
    const op_entry& op = *plan.order[i]->op;
    if (in.leaf[i] || !op.saved_elements || (op.saved_only_for_backward && !runs_backward(i))) continue;
    bp.saved_buf[i] = new_buffer(i, false);
    bp.buffers[static_cast<std::size_t>(bp.saved_buf[i])].saved = true;
    touch(bp.saved_buf[i], fstep(i), i, -1);
    if (runs_backward(i)) touch(bp.saved_buf[i], bstep(i), -1, i);
  }
  for (int i = 0; i < n; ++i) {  // and what its backward uses, alive during that backward only
    if (!runs_backward(i) || !plan.order[i]->op->scratch_elements) continue;
    bp.scratch_buf[i] = new_buffer(i, false);
    bp.buffers[static_cast<std::size_t>(bp.scratch_buf[i])].scratch = true;
    touch(bp.scratch_buf[i], bstep(i), -1, i);
  }

  // ---- in place: node i overwrites its input 0 when that buffer is read by nobody after i
  // (every other access happens-before i's task, none in backward), in topological order
  const reachability fwd_reach = reach_of(in.sched->forward);
  {
    std::vector<std::vector<int>> fwd_tasks(bp.buffers.size());
    std::vector<std::uint8_t> read_in_backward(bp.buffers.size(), 0);
    for (const access& e : events) {
      if (e.fwd_task >= 0) fwd_tasks[e.buf].push_back(e.fwd_task);
      if (e.bwd_task >= 0) read_in_backward[e.buf] = 1;
    }
    for (int i = 0; i < n; ++i) {
      const node_desc& d = *plan.order[i];
      if (in.keep_all || in.leaf[i] || in.view_of[i] >= 0 || !d.op->can_run_in_place || d.inputs.empty()) continue;
      const int j = plan.inputs(i)[0];
      const int b = bp.val_buf[j], mine = bp.val_buf[i];
      if (b < 0 || in.leaf[bp.buffers[b].node] || d.elem != dtype::real || !same_dims(plan, i, j)) continue;
      bool ok = !read_in_backward[b];
      auto ins = plan.inputs(i);
      for (std::size_t k = 1; k < ins.size(); ++k) ok = ok && bp.val_buf[ins[k]] != b;
      for (int a : fwd_tasks[b]) ok = ok && (a == i || fwd_reach.reaches(a, i));
      for (int x = 0; x < n && ok; ++x)  // nobody sharing b may be kept
        if (bp.val_buf[x] == b && pinned_node[x]) ok = false;
      if (!ok) continue;
      for (access& e : events)
        if (e.buf == mine) e.buf = b;
      fwd_tasks[b].insert(fwd_tasks[b].end(), fwd_tasks[mine].begin(), fwd_tasks[mine].end());
      read_in_backward[b] = read_in_backward[mine];
      bp.buffers[mine].node = -1;  // dead: nothing maps to it
      for (int x = 0; x < n; ++x)
        if (bp.val_buf[x] == mine) bp.val_buf[x] = b;
      bp.in_place_of[i] = j;
    }
  }

  plan_recompute(c);

  for (int i = 0; i < n; ++i) {
    if (bp.val_buf[i] < 0) continue;
    if (pinned_node[i]) touch(bp.val_buf[i], end, -1, -1);
    bp.value_kept[i] = pinned_node[i] || plan.order[i]->op->role != node_role::op;
  }
  for (int i = 0; i < n; ++i)
    if (plan.order[i]->op->role != node_role::op) bp.value_kept[i] = 1;

  // ---- gradients: of computed nodes and of inputs asked for; views share when they can
  if (!in.inference) {
    for (int x = 0; x < n; ++x) {
      if (!in.needs_grad[x] || plan.order[x]->op->role == node_role::param) continue;
      bp.grad_buf[x] = in.grad_view[x] ? bp.grad_buf[in.view_of[x]] : new_buffer(x, true);
    }
    for (int r : plan.roots) touch(bp.grad_buf[r], pre_backward, -1, -1);
    for (int c = 0; c < n; ++c) {
      if (!runs_backward(c)) continue;
      for (int x : in.sched->zero_before[c]) touch(bp.grad_buf[x], bstep(c), -1, c);
      for (int j : plan.inputs(c)) touch(bp.grad_buf[j], bstep(c), -1, c);  // contributions
      touch(bp.grad_buf[c], bstep(c), -1, c);                                 // its own dout
    }
    // backward in place: the first contribution to input p's gradient (p = the op's
    // backward_in_place_input) written over the node's own gradient, which nothing reads
    // afterwards (the buffers meet at that task)
    if (!in.keep_all)
      for (int c = n - 1; c >= 0; --c) {
        if (!runs_backward(c) || !plan.order[c]->op->backward_in_place) continue;
        auto ins = plan.inputs(c);
        const auto p = static_cast<std::size_t>(plan.order[c]->op->backward_in_place_input);
        if (p >= ins.size()) continue;
        const int x = ins[p], gx = bp.grad_buf[x], gc = bp.grad_buf[c];
        if (gx < 0 || gc < 0 || gx == gc || in.leaf[x] || pinned_node[x] || pinned_node[c] || in.grad_view[x] ||
            !in.sched->edge_fresh[static_cast<std::size_t>(plan.in_off[c]) + p] || !same_dims(plan, c, x))
          continue;
        bool once = true;  // x at no other position of c (its gradient there would be dy too)
        for (std::size_t k = 0; k < ins.size(); ++k) once = once && (k == p || ins[k] != x);
        if (!once) continue;
        for (access& e : events)
          if (e.buf == gx) e.buf = gc;
        for (int y = 0; y < n; ++y)
          if (bp.grad_buf[y] == gx) bp.grad_buf[y] = gc;
        bp.buffers[gx].node = -1;  // dead
      }
    for (int x = 0; x < n; ++x) {
      if (bp.grad_buf[x] < 0) continue;
      const bool input = plan.order[x]->op->role == node_role::input;
      if (pinned_node[x] || input) touch(bp.grad_buf[x], end, -1, -1);
      bp.grad_kept[x] = pinned_node[x] || input;
    }
  }
  for (int x = 0; x < n; ++x)
    if (plan.order[x]->op->role == node_role::param) bp.grad_kept[x] = 1;

  plan_conflicts(c, fwd_reach);
  return std::move(c.bp);
}

}  // namespace loom::detail
