// The memory planner (see planner.hpp).
#include "planner.hpp"

#include <algorithm>
#include <limits>

namespace loom::detail {
namespace {

// Nodes reachable from each node along a DAG's edges (bit i of row a: a happens-before i).
struct reachability {
  std::size_t words = 0;
  std::vector<std::uint64_t> bits;
  bool reaches(int a, int b) const { return (bits[static_cast<std::size_t>(a) * words + b / 64] >> (b % 64)) & 1u; }
};

// `ascending`: every edge goes from a lower to a higher node index (the forward DAG); else
// from higher to lower (the backward DAG).
reachability reach_of(const dag& g, int n, bool ascending) {
  reachability r;
  r.words = static_cast<std::size_t>(n + 63) / 64;
  r.bits.assign(r.words * static_cast<std::size_t>(n), 0);
  for (int k = 0; k < n; ++k) {
    const int a = ascending ? n - 1 - k : k;  // successors first
    std::uint64_t* row = &r.bits[static_cast<std::size_t>(a) * r.words];
    for (int s : g.succ[a]) {
      row[s / 64] |= std::uint64_t{1} << (s % 64);
      const std::uint64_t* srow = &r.bits[static_cast<std::size_t>(s) * r.words];
      for (std::size_t w = 0; w < r.words; ++w) row[w] |= srow[w];
    }
  }
  return r;
}

void add_task(std::vector<int>& tasks, int node) {
  if (std::find(tasks.begin(), tasks.end(), node) == tasks.end()) tasks.push_back(node);
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

}  // namespace

buffer_plan plan_buffers(const planner_input& in) {
  const plan_view& plan = *in.plan;
  const int n = plan.size();
  const int pre_forward = 0, pre_backward = n + 1, end = 2 * n + 3;
  auto fstep = [&](int i) { return 1 + i; };
  auto bstep = [&](int i) { return n + 2 + (n - 1 - i); };
  auto root = [&](int i) {
    while (in.view_of[i] >= 0) i = in.view_of[i];
    return i;
  };
  auto runs_backward = [&](int c) { return !in.inference && !in.leaf[c] && in.needs_grad[c]; };
  buffer_plan bp;
  bp.val_buf.assign(n, -1);
  bp.grad_buf.assign(n, -1);
  bp.value_kept.assign(n, 0);
  bp.grad_kept.assign(n, 0);
  bp.in_place_of.assign(n, -1);
  std::vector<std::uint8_t> pinned_node(n, 0);
  for (int r : plan.roots) pinned_node[r] = 1;
  for (int i = 0; i < n; ++i) pinned_node[i] = pinned_node[i] || in.keep[i] || in.keep_all;

  auto touch = [&](int b, int step, int fwd_task, int bwd_task) {
    if (b < 0) return;
    planned_buffer& buf = bp.buffers[b];
    buf.first = std::min(buf.first, step);
    buf.last = std::max(buf.last, step);
    if (fwd_task >= 0) add_task(buf.fwd_tasks, fwd_task);
    if (bwd_task >= 0) add_task(buf.bwd_tasks, bwd_task);
  };
  auto new_buffer = [&](int node, bool grad) {
    planned_buffer b;
    b.node = node;
    b.grad = grad;
    b.first = std::numeric_limits<int>::max();
    b.last = std::numeric_limits<int>::min();
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
    } else if (in.view_of[i] >= 0) {
      bp.val_buf[i] = bp.val_buf[root(i)];
      touch(bp.val_buf[i], fstep(i), i, -1);
    } else {
      bp.val_buf[i] = new_buffer(i, false);
      touch(bp.val_buf[i], fstep(i), i, -1);
    }
  }
  auto value_accesses = [&](int c) {  // what node c's tasks read of its inputs' and its own value
    auto ins = plan.inputs(c);
    for (std::size_t k = 0; k < ins.size(); ++k) {
      touch(bp.val_buf[ins[k]], fstep(c), c, -1);
      if (runs_backward(c) && plan.order[c]->op->backward_reads_input(static_cast<int>(k)))
        touch(bp.val_buf[ins[k]], bstep(c), -1, c);
    }
    if (runs_backward(c) && plan.order[c]->op->backward_reads_output) touch(bp.val_buf[c], bstep(c), -1, c);
  };

  // in place: node i overwrites its input 0 when that buffer is read by nobody after i (every
  // other forward access happens-before i's task, and no backward reads it), in topological order
  const reachability fwd_reach = reach_of(in.sched->forward, n, true);
  for (int c = 0; c < n; ++c)
    if (!in.leaf[c]) value_accesses(c);
  for (int i = 0; i < n; ++i) {
    const node_desc& d = *plan.order[i];
    if (in.keep_all || in.leaf[i] || in.view_of[i] >= 0 || !d.op->can_run_in_place || d.inputs.empty()) continue;
    const int j = plan.inputs(i)[0];
    const int b = bp.val_buf[j], mine = bp.val_buf[i];
    if (b < 0 || in.leaf[bp.buffers[b].node] || d.elem != dtype::real || !same_dims(plan, i, j)) continue;
    bool ok = !bp.buffers[b].pinned && !pinned_node[j] && bp.buffers[b].bwd_tasks.empty();
    auto ins = plan.inputs(i);
    for (std::size_t k = 1; k < ins.size(); ++k) ok = ok && bp.val_buf[ins[k]] != b;
    for (int a : bp.buffers[b].fwd_tasks) ok = ok && (a == i || fwd_reach.reaches(a, i));
    // nodes sharing b (j, its views) must not be pinned
    for (int x = 0; x < n && ok; ++x)
      if (bp.val_buf[x] == b && pinned_node[x]) ok = false;
    if (!ok) continue;
    planned_buffer& into = bp.buffers[b];
    planned_buffer& from = bp.buffers[mine];
    into.first = std::min(into.first, from.first);
    into.last = std::max(into.last, from.last);
    for (int t : from.fwd_tasks) add_task(into.fwd_tasks, t);
    for (int t : from.bwd_tasks) add_task(into.bwd_tasks, t);
    from = planned_buffer{};  // dead: nothing maps to it
    for (int x = 0; x < n; ++x)
      if (bp.val_buf[x] == mine) bp.val_buf[x] = b;
    bp.in_place_of[i] = j;
  }
  for (int i = 0; i < n; ++i) {
    if (bp.val_buf[i] < 0) continue;
    if (pinned_node[i]) {
      bp.buffers[bp.val_buf[i]].pinned = true;
      touch(bp.val_buf[i], end, -1, -1);
    }
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
    for (int x = 0; x < n; ++x) {
      if (bp.grad_buf[x] < 0) continue;
      const bool input = plan.order[x]->op->role == node_role::input;
      if (pinned_node[x] || input) {
        bp.buffers[bp.grad_buf[x]].pinned = true;
        touch(bp.grad_buf[x], end, -1, -1);
      }
      bp.grad_kept[x] = pinned_node[x] || input;
    }
  }
  for (int x = 0; x < n; ++x)
    if (plan.order[x]->op->role == node_role::param) bp.grad_kept[x] = 1;

  // ---- conflicts: overlapping lifetimes, or an earlier tenant not ordered before the later
  // one's first write in the same pass
  const reachability bwd_reach = reach_of(in.sched->backward, n, false);
  const int nb = static_cast<int>(bp.buffers.size());
  bp.words = static_cast<std::size_t>(nb + 63) / 64;
  bp.conflict.assign(bp.words * static_cast<std::size_t>(nb), 0);
  auto first_task = [&](const planned_buffer& b, bool& forward) {
    // the task of b's first write, or −1 for the steps before a pass
    forward = b.first <= n;
    if (b.first == pre_forward || b.first == pre_backward) return -1;
    return forward ? b.first - 1 : n - 1 - (b.first - n - 2);
  };
  auto ordered_before = [&](const planned_buffer& e, const planned_buffer& l) {
    if (e.last >= l.first) return false;
    bool forward = false;
    const int t = first_task(l, forward);
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
