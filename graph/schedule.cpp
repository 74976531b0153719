// The forward and backward DAGs of a plan (see schedule.hpp).
#include "schedule.hpp"

#include <set>

namespace loom::detail {

schedules build_schedules(const plan_view& plan, std::span<const std::uint8_t> leaf,
                          std::span<const std::uint8_t> needs_grad) {
  const int n = plan.size();
  schedules s;
  // forward: a computed node waits for its computed inputs
  s.forward.succ.assign(n, {});
  s.forward.pending0.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    if (leaf[i]) continue;
    std::set<int> deps;
    for (int j : plan.inputs(i))
      if (!leaf[j]) deps.insert(j);
    s.forward.pending0[i] = static_cast<int>(deps.size());
    for (int j : deps) s.forward.succ[j].push_back(i);
    if (deps.empty()) s.forward.start.push_back(i);
  }
  // backward: a node runs after every consumer has added its gradient; consumers of one
  // node add theirs in a fixed order (descending node index), so sums are deterministic.
  std::vector<std::set<int>> preds(n);
  for (int x = 0; x < n; ++x) {
    if (!needs_grad[x]) continue;
    auto cons = plan.consumers(x);
    if (!leaf[x])
      for (int c : cons) preds[x].insert(c);
    for (std::size_t k = 0; k + 1 < cons.size(); ++k) preds[cons[k]].insert(cons[k + 1]);
  }
  // each gradient buffer is prepared by the task of its first contributor, the consumer with
  // the largest index (consumers run in descending order): that kernel stores its first
  // contribution when it can (writes_fresh), else the task zeroes the buffer just before it.
  // The outputs' own gradients are set from the cotangents before the pass.
  s.zero_before.assign(n, {});
  s.edge_fresh.assign(static_cast<std::size_t>(plan.edges()), 0);
  std::vector<std::uint8_t> is_root(n, 0);
  for (int r : plan.roots) is_root[r] = 1;
  for (int x = 0; x < n; ++x) {
    auto cons = plan.consumers(x);
    if (!needs_grad[x] || is_root[x] || cons.empty()) continue;
    const int c = cons.back();
    if (plan.order[c]->op->writes_fresh) {
      auto ins = plan.inputs(c);
      for (std::size_t pos = 0; pos < ins.size(); ++pos)
        if (ins[pos] == x) {
          s.edge_fresh[static_cast<std::size_t>(plan.in_off[c]) + pos] = 1;  // the first position only
          break;
        }
    } else {
      s.zero_before[c].push_back(x);
    }
  }
  // a leaf's gradient is final after its consumers' tasks, which run in descending order
  s.leaf_grads_final.assign(n, {});
  for (int x = 0; x < n; ++x)
    if (leaf[x] && needs_grad[x] && !plan.consumers(x).empty())
      s.leaf_grads_final[plan.consumers(x).front()].push_back(x);
  s.backward.succ.assign(n, {});
  s.backward.pending0.assign(n, 0);
  for (int i = n - 1; i >= 0; --i) {
    if (leaf[i] || !needs_grad[i]) continue;
    s.backward.pending0[i] = static_cast<int>(preds[i].size());
    for (int c : preds[i]) s.backward.succ[c].push_back(i);
    if (preds[i].empty()) s.backward.start.push_back(i);
  }
  s.forward.finish();
  s.backward.finish();
  return s;
}

}  // namespace loom::detail
