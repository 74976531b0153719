// The plan rewrite (see rewrite.hpp): fusion rules applied from the outputs down, so that a
// pattern is matched whole before its parts could be.
#include "rewrite.hpp"

#include <algorithm>

#include "loom/graph/fusion.hpp"

namespace loom::detail {

std::unique_ptr<rewritten_plan> rewrite(const plan_view& p, std::span<const std::uint8_t> keep, bool fuse) {
  auto r = std::make_unique<rewritten_plan>();
  const int n = p.size();
  r->of_original.resize(n);
  r->absorbed_into.assign(n, -1);
  r->params.assign(n, nullptr);
  for (int i = 0; i < n; ++i) r->of_original[i] = i;
  r->to_original = r->of_original;
  r->view = p;
  if (!fuse) return r;

  // nodes a rule may absorb: computed, and nobody reads them from outside (outputs, named, kept)
  std::vector<std::uint8_t> absorbable(n, 1), taken(n, 0);
  for (int i = 0; i < n; ++i) absorbable[i] = p.order[i]->op->role == node_role::op && !keep[i];
  for (int i : p.roots) absorbable[i] = 0;
  for (int i : p.named) absorbable[i] = 0;
  std::vector<int> fusion_at(n, -1);
  std::vector<fusion> found;
  const std::vector<fusion_rule> rules = fusion_rules();
  for (int i = n - 1; i >= 0; --i) {
    if (taken[i] || p.order[i]->op->role != node_role::op) continue;
    for (const fusion_rule& rule : rules) {
      std::optional<fusion> f = rule.match(p, i, absorbable);
      if (!f || f->root != i) continue;
      bool ok = true;
      for (int a : f->absorbed) ok = ok && !taken[a] && absorbable[a] && a != i;
      if (!ok) continue;
      taken[i] = 1;
      for (int a : f->absorbed) taken[a] = 1;
      for (int x : f->inputs) absorbable[x] = 0;  // a later (lower) pattern may not swallow them
      absorbable[i] = 0;
      fusion_at[i] = static_cast<int>(found.size());
      found.push_back(std::move(*f));
      break;
    }
  }
  if (found.empty()) return r;

  // the new nodes, in the original topological order (a fused node sits where its root was:
  // all of its inputs come before it)
  int k = 0;
  for (int i = 0; i < n; ++i) r->of_original[i] = taken[i] && fusion_at[i] < 0 ? -1 : k++;
  const int m = k;
  r->to_original.assign(m, -1);
  for (int i = 0; i < n; ++i)
    if (r->of_original[i] >= 0) r->to_original[r->of_original[i]] = i;
  r->order.resize(m);
  r->dims.resize(m);
  r->params.assign(m, nullptr);
  // at most the original's edges (a kept node reads what it read) and each fused node's inputs
  std::size_t most_edges = p.in_idx.size();
  for (const fusion& f : found) most_edges += f.inputs.size();
  r->in_off.assign(m + 1, 0);
  r->in_idx.assign(most_edges, 0);
  r->from_param.assign(m, 0);
  r->from_input.assign(m, 0);
  edge_writer edges(r->in_off, r->in_idx, r->from_param, r->from_input);
  std::vector<int> ins;
  for (int i = 0; i < n; ++i) {
    const int at = r->of_original[i];
    if (at < 0) continue;
    ins.clear();
    if (fusion_at[i] >= 0) {
      const fusion& f = found[static_cast<std::size_t>(fusion_at[i])];
      auto& descs = r->made_inputs.emplace_back();
      for (int x : f.inputs) descs.push_back(p.order[x]);
      node_desc d;
      d.op = f.op;
      d.elem = p.order[i]->elem;
      d.rank = p.order[i]->rank;
      d.dims = p.order[i]->dims;
      d.inputs = descs;
      d.hash = detail::fnv(p.order[i]->hash, static_cast<std::uint64_t>(f.op->id));
      d.fused = f.params.get();
      r->order[at] = &r->made.emplace_back(d);
      r->params[at] = f.params;
      for (int x : f.inputs) ins.push_back(r->of_original[x]);
      for (int a : f.absorbed) r->absorbed_into[a] = at;
      ++r->fused;
    } else {
      r->order[at] = p.order[i];
      for (int x : p.inputs(i)) ins.push_back(r->of_original[x]);
    }
    r->dims[at] = p.dims[i];
    edges.add(*r->order[at], [&](auto&& f) {  // nodes come in order of `at`: the original's
      for (int x : ins) f(x);
    });
  }
  r->in_idx.resize(static_cast<std::size_t>(edges.edges));
  r->out_off.assign(m + 1, 0);
  r->out_idx.assign(r->in_idx.size(), 0);
  r->out_idx.resize(static_cast<std::size_t>(edges.finish(r->out_off, r->out_idx)));
  for (int x : p.roots) r->roots.push_back(r->of_original[x]);
  for (int x : p.named) r->named.push_back(r->of_original[x]);
  r->view = {r->order, r->in_off, r->in_idx, r->out_off, r->out_idx, p.syms,
             r->dims,  r->roots,  r->named,  r->from_param, r->from_input};
  return r;
}

}  // namespace loom::detail
