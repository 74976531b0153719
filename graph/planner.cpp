// The memory planner (see planner.hpp).
#include "planner.hpp"

#include <algorithm>
#include <limits>

namespace loom::detail {
namespace {

// Tasks reachable from each task along a DAG's edges (bit b of row a: a happens-before b).
struct reachability {
  std::size_t words = 0;
  std::vector<std::uint64_t> bits;
  bool reaches(int a, int b) const { return (bits[static_cast<std::size_t>(a) * words + b / 64] >> (b % 64)) & 1u; }
};

reachability reach_of(const dag& g) {
  const int n = static_cast<int>(g.succ.size());
  // a topological order (Kahn), then rows filled successors first
  std::vector<int> pending(g.pending0.begin(), g.pending0.end()), order;
  for (int i = 0; i < n; ++i)
    if (pending[i] == 0) order.push_back(i);
  for (std::size_t k = 0; k < order.size(); ++k)
    for (int s : g.succ[order[k]])
      if (--pending[s] == 0) order.push_back(s);
  reachability r;
  r.words = static_cast<std::size_t>(n + 63) / 64;
  r.bits.assign(r.words * static_cast<std::size_t>(n), 0);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    std::uint64_t* row = &r.bits[static_cast<std::size_t>(*it) * r.words];
    for (int s : g.succ[*it]) {
      row[s / 64] |= std::uint64_t{1} << (s % 64);
      const std::uint64_t* srow = &r.bits[static_cast<std::size_t>(s) * r.words];
      for (std::size_t w = 0; w < r.words; ++w) row[w] |= srow[w];
    }
  }
  return r;
}

bool same_dims(const plan_view& plan, int a, int b) {
  if (plan.order[a]->rank != plan.order[b]->rank) return false;
  for (int k = 0; k < plan.order[a]->rank; ++k) {
    const plan_dim& x = plan.dims[a][k];
    const plan_dim& y = plan.dims[b][k];
    if (x.constant != y.constant || x.n_syms != y.n_syms) return false;
    for (int s = 0; s < x.n_syms; ++s)
      if (x.sym[s] != y.sym[s]) return false;
  }
  return true;
}

// One access of a buffer: at a step, by a forward or a backward task (or by neither: the
// steps before a pass, and the end).
struct access {
  int buf, step, fwd_task, bwd_task;
};

}  // namespace

buffer_plan plan_buffers(const planner_input& in) {
  const plan_view& plan = *in.plan;
  const int n = plan.size();
  const int pre_forward = 0, pre_backward = n + 1, end = 3 * n + 3;
  auto fstep = [&](int i) { return 1 + i; };
  auto bstep = [&](int i) { return n + 2 + 2 * (n - 1 - i); };
  auto root = [&](int i) {
    while (in.view_of[i] >= 0) i = in.view_of[i];
    return i;
  };
  auto runs_backward = [&](int c) { return !in.inference && !in.leaf[c] && in.needs_grad[c]; };
  buffer_plan bp;
  bp.val_buf.assign(n, -1);
  bp.grad_buf.assign(n, -1);
  bp.val_buf_bwd.assign(n, -1);
  bp.value_kept.assign(n, 0);
  bp.grad_kept.assign(n, 0);
  bp.in_place_of.assign(n, -1);
  std::vector<std::uint8_t> pinned_node(n, 0);
  for (int r : plan.roots) pinned_node[r] = 1;
  for (int i : plan.named) pinned_node[i] = 1;  // readable by name after the step
  for (int i = 0; i < n; ++i) pinned_node[i] = pinned_node[i] || in.keep[i] || in.keep_all;

  std::vector<access> events;
  auto touch = [&](int b, int step, int fwd_task, int bwd_task) {
    if (b >= 0) events.push_back({b, step, fwd_task, bwd_task});
  };
  auto new_buffer = [&](int node, bool grad) {
    planned_buffer b;
    b.node = node;
    b.grad = grad;
    bp.buffers.push_back(b);
    return static_cast<int>(bp.buffers.size()) - 1;
  };

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

  // ---- recomputation: the values backward needs inside a block closed by a checkpoint node
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
      for (int u : nodes) {  // the recomputation writes them and reads their inputs
        touch(bp.val_buf_bwd[u], step, -1, task);
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
    // backward in place: the first contribution to input 0's gradient written over the
    // node's own gradient, which nothing reads afterwards (the buffers meet at that task)
    if (!in.keep_all)
      for (int c = n - 1; c >= 0; --c) {
        if (!runs_backward(c) || !plan.order[c]->op->backward_in_place) continue;
        auto ins = plan.inputs(c);
        const int x = ins[0], gx = bp.grad_buf[x], gc = bp.grad_buf[c];
        if (gx < 0 || gc < 0 || gx == gc || in.leaf[x] || pinned_node[x] || pinned_node[c] || in.grad_view[x] ||
            !in.sched->edge_fresh[static_cast<std::size_t>(plan.in_off[c])] || !same_dims(plan, c, x))
          continue;
        bool once = true;
        for (std::size_t k = 1; k < ins.size(); ++k) once = once && ins[k] != x;
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

  // ---- lifetimes from the accesses
  for (planned_buffer& b : bp.buffers) {
    b.first = std::numeric_limits<int>::max();
    b.last = std::numeric_limits<int>::min();
  }
  for (const access& e : events) {
    planned_buffer& b = bp.buffers[e.buf];
    b.first = std::min(b.first, e.step);
    b.last = std::max(b.last, e.step);
    b.pinned = b.pinned || e.step == end;
    auto add = [](std::vector<int>& tasks, int t) {
      if (t >= 0 && std::find(tasks.begin(), tasks.end(), t) == tasks.end()) tasks.push_back(t);
    };
    add(b.fwd_tasks, e.fwd_task);
    add(b.bwd_tasks, e.bwd_task);
  }

  // ---- conflicts: overlapping lifetimes, or an earlier tenant not ordered before the later
  // one's first write in the same pass
  const reachability bwd_reach = reach_of(in.sched->backward);
  std::vector<int> step_task(static_cast<std::size_t>(end) + 1, -1);
  for (int i = 0; i < n; ++i) {
    step_task[fstep(i)] = i;
    step_task[bstep(i)] = i;
  }
  for (std::size_t s = 0; s < bp.recompute.size(); ++s)
    for (int c = 0; c < n; ++c)  // the recompute task's step follows its checkpoint's
      for (int t : in.sched->backward.succ[c])
        if (t == n + static_cast<int>(s)) step_task[bstep(c) + 1] = t;
  const int nb = static_cast<int>(bp.buffers.size());
  bp.words = static_cast<std::size_t>(nb + 63) / 64;
  bp.conflict.assign(bp.words * static_cast<std::size_t>(nb), 0);
  auto ordered_before = [&](const planned_buffer& e, const planned_buffer& l) {
    if (e.last >= l.first) return false;
    const bool forward = l.first <= n;
    const int t = step_task[l.first];
    if (t < 0) return true;  // l starts before its pass's tasks; e ended in an earlier step
    for (int a : forward ? e.fwd_tasks : e.bwd_tasks)
      if (a == t || !(forward ? fwd_reach.reaches(a, t) : bwd_reach.reaches(a, t))) return false;
    return true;
  };
  for (int a = 0; a < nb; ++a) {
    const planned_buffer& A = bp.buffers[a];
    if (A.node < 0) continue;
    for (int b = a + 1; b < nb; ++b) {
      const planned_buffer& B = bp.buffers[b];
      if (B.node < 0) continue;
      const bool share = in.keep_all ? false
                         : A.first < B.first ? ordered_before(A, B)
                         : B.first < A.first ? ordered_before(B, A)
                                             : false;
      if (share) continue;
      bp.conflict[static_cast<std::size_t>(a) * bp.words + b / 64] |= std::uint64_t{1} << (b % 64);
      bp.conflict[static_cast<std::size_t>(b) * bp.words + a / 64] |= std::uint64_t{1} << (a % 64);
    }
  }
  return bp;
}

std::int64_t place_buffers(const buffer_plan& bp, std::span<const std::int64_t> sizes,
                           std::vector<std::int64_t>& offsets) {
  const int nb = static_cast<int>(bp.buffers.size());
  offsets.assign(nb, 0);
  std::vector<int> order;
  for (int b = 0; b < nb; ++b)
    if (sizes[b] > 0) order.push_back(b);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
    return bp.buffers[a].first < bp.buffers[b].first;
  });
  std::vector<std::pair<std::int64_t, std::int64_t>> taken;  // [begin, end) of conflicting placed buffers
  std::vector<int> placed;
  std::int64_t total = 0;
  for (int b : order) {
    taken.clear();
    for (int p : placed)
      if (bp.conflicts(b, p)) taken.emplace_back(offsets[p], offsets[p] + sizes[p]);
    std::sort(taken.begin(), taken.end());
    // best fit: the smallest gap that holds it, else after the last conflicting buffer
    std::int64_t best = -1, best_gap = std::numeric_limits<std::int64_t>::max(), cursor = 0;
    for (const auto& [begin, stop] : taken) {
      if (begin > cursor && begin - cursor >= sizes[b] && begin - cursor < best_gap) {
        best = cursor;
        best_gap = begin - cursor;
      }
      cursor = std::max(cursor, stop);
    }
    offsets[b] = best >= 0 ? best : cursor;
    total = std::max(total, offsets[b] + sizes[b]);
    placed.push_back(b);
  }
  return total;
}

}  // namespace loom::detail
