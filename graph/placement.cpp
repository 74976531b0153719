// The memory planner's placement: lifetimes, conflicts (see planner.hpp) and offsets.
#include <algorithm>
#include <limits>

#include "planner_context.hpp"

namespace loom::detail {

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

void plan_conflicts(plan_context& c, const reachability& fwd_reach) {
  const planner_input& in = c.in;
  const int n = c.n;
  buffer_plan& bp = c.bp;
  std::vector<access>& events = c.events;
  auto bstep = [&](int i) { return c.bstep(i); };
  const int end = c.end;
  auto fstep = [&](int i) { return c.fstep(i); };
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
