// The memory planner's recomputation (see planner.hpp and ops/checkpoint.hpp).
#include <algorithm>

#include "planner_context.hpp"

namespace loom::detail {

void plan_recompute(plan_context& c) {
  const planner_input& in = c.in;
  const plan_view& plan = c.plan;
  const int n = c.n;
  buffer_plan& bp = c.bp;
  std::vector<access>& events = c.events;
  const std::vector<std::uint8_t>& pinned_node = c.pinned_node;
  auto bstep = [&](int i) { return c.bstep(i); };
  auto runs_backward = [&](int i) { return c.runs_backward(i); };
  auto touch = [&](int b, int step, int fwd_task, int bwd_task) { c.touch(b, step, fwd_task, bwd_task); };
  auto new_buffer = [&](int node, bool grad) { return c.new_buffer(node, grad); };
  // recomputation: the values backward needs inside a block closed by a checkpoint node
  // get a second buffer, written by one task that runs the block's forward again just after
  // the checkpoint's backward; their first buffer dies with their last forward reader
  if (in.recompute && !in.inference && !in.keep_all) {
    dag& bwd = in.sched->backward;
    for (int c = 0; c < n; ++c) {
      if (!plan.order[c]->op->bounds_recompute || !runs_backward(c)) continue;
      auto ins = plan.inputs(c);
      const int r = ins[0];
      // before[u]: u is a block input or comes before one (not part of the block)
      std::vector<std::uint8_t> before(n, 0), interior(n, 0);
      std::vector<int> stack(ins.begin() + 1, ins.end());
      while (!stack.empty()) {
        const int u = stack.back();
        stack.pop_back();
        if (before[u]) continue;
        before[u] = 1;
        for (int v : plan.inputs(u)) stack.push_back(v);
      }
      for (int v : plan.inputs(r)) stack.push_back(v);
      while (!stack.empty()) {
        const int u = stack.back();
        stack.pop_back();
        if (before[u] || interior[u] || in.leaf[u] || u == r) continue;
        interior[u] = 1;
        for (int v : plan.inputs(u)) stack.push_back(v);
      }
      // a buffer may be recomputed when every node in it is interior and unkept, and only
      // the block's own backward tasks (interior nodes and r) read it
      std::vector<std::uint8_t> candidate(bp.buffers.size(), 0), needed(bp.buffers.size(), 0);
      for (int u = 0; u < n; ++u)
        if (interior[u] && bp.val_buf[u] >= 0) candidate[bp.val_buf[u]] = 1;
      for (int x = 0; x < n; ++x)
        if (bp.val_buf[x] >= 0 && (!interior[x] || pinned_node[x])) candidate[bp.val_buf[x]] = 0;
      for (const access& e : events) {
        if (e.bwd_task < 0 || !candidate[e.buf]) continue;
        if (e.bwd_task < n && (interior[e.bwd_task] || e.bwd_task == r)) needed[e.buf] = 1;
        else candidate[e.buf] = 0;
      }
      // the nodes to run again: those in needed buffers and, transitively, the interior
      // inputs those read (from a buffer of their own when it may be recomputed, else from
      // the first buffer, which must then still hold that input's value: nothing after it in place)
      std::vector<std::uint8_t> again(n, 0);
      bool ok = true;
      for (int u = n - 1; u >= 0 && ok; --u) {
        const int b = bp.val_buf[u];
        if (!interior[u] || b < 0) continue;
        bool read_again = false;
        for (int x = u + 1; x < n && !read_again; ++x)
          if (again[x])
            for (int v : plan.inputs(x)) read_again = read_again || v == u;
        again[u] = candidate[b] && (needed[b] || read_again);
        if (read_again && !again[u])
          for (int x = u + 1; x < n; ++x)
            if (bp.val_buf[x] == b && in.view_of[x] < 0) ok = false;  // overwritten in place after u
      }
      for (int u = 0; u < n && ok; ++u)  // an input recomputed by another block is not there yet
        if (again[u])
          for (int v : plan.inputs(u)) ok = ok && (interior[v] || bp.val_buf_bwd[v] < 0);
      ok = ok && std::find(again.begin(), again.end(), 1) != again.end();
      if (!ok) continue;  // nothing to gain, or an input the recomputation cannot read: keep it all
      const int task = n + static_cast<int>(bp.recompute.size());
      const int step = bstep(c) + 1;
      std::vector<int> nodes;
      std::vector<int> second(bp.buffers.size(), -1);
      for (int u = 0; u < n; ++u) {
        if (!again[u]) continue;
        nodes.push_back(u);
        const int b = bp.val_buf[u];
        if (second[b] < 0) second[b] = new_buffer(bp.buffers[b].node, false);
        bp.val_buf_bwd[u] = second[b];
      }
      for (access& e : events)  // backward reads move to the second buffer
        if (e.bwd_task >= 0 && e.buf < static_cast<int>(second.size()) && second[e.buf] >= 0) e.buf = second[e.buf];
      for (int u : nodes) {  // the recomputation writes them (and what they save) and reads their inputs
        touch(bp.val_buf_bwd[u], step, -1, task);
        touch(bp.saved_buf[u], step, -1, task);
        for (int v : plan.inputs(u)) touch(again[v] ? bp.val_buf_bwd[v] : bp.val_buf[v], step, -1, task);
      }
      bp.recompute.push_back(nodes);
      // the task: after the checkpoint's backward, before any backward task of the block
      bwd.succ.resize(static_cast<std::size_t>(task) + 1);
      bwd.pending0.resize(static_cast<std::size_t>(task) + 1, 0);
      bwd.succ[c].push_back(task);
      bwd.pending0[task] = 1;
      for (int v = 0; v < n; ++v) {
        if (!(interior[v] || v == r) || !runs_backward(v)) continue;
        bwd.succ[task].push_back(v);
        if (bwd.pending0[v]++ == 0) std::erase(bwd.start, v);
      }
    }
    bwd.finish();
  }
}

}  // namespace loom::detail
