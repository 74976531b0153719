// The memory plan as a report, for dims given by name (executor::memory_plan), and its text.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>

#include "executor_impl.hpp"

namespace loom {

namespace {
std::string mib(std::size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return b;
}
}  // namespace

template <class T>
memory_report executor<T>::memory_plan(std::span<const std::pair<std::string_view, std::int64_t>> given) const {
  const impl& m = *p_;
  const plan_view& plan = m.plan;
  std::vector<std::int64_t> sym(plan.syms.size(), -1);
  for (const auto& [name, value] : given) {
    std::size_t k = 0;
    while (k < plan.syms.size() && plan.syms[k] != name) ++k;
    if (k == plan.syms.size()) throw shape_error("memory_plan: the graph has no dim " + in_quotes(name));
    if (value < 0) throw shape_error("memory_plan: dim " + in_quotes(name) + " is negative: " + std::to_string(value));
    sym[k] = value;
  }
  for (std::size_t k = 0; k < sym.size(); ++k)
    if (sym[k] < 0) throw shape_error("memory_plan: no value given for dim " + in_quotes(plan.syms[k]));
  constexpr std::int64_t limit = std::numeric_limits<std::int64_t>::max() / 64;
  auto size_of = [&](int node) {
    std::int64_t size = 1;
    for (int a = 0; a < plan.order[node]->rank; ++a) {
      const std::optional<std::int64_t> v = plan.dims[node][a].value(sym);
      if (!v || (*v != 0 && size > limit / *v))
        throw shape_error("memory_plan: " + plan.describe(node) + " would hold more than 2^57 elements");
      size *= *v;
    }
    return (size + 15) / 16 * 16;
  };
  const auto& bp = m.buffers;
  std::vector<std::int64_t> sizes(bp.buffers.size(), 0);
  auto dims_of = [&](int node) {
    dims_t d;
    d.rank = plan.order[node]->rank;
    for (int a = 0; a < d.rank; ++a) d.d[a] = plan.dims[node][a].value(sym).value_or(0);  // size_of checked it
    return d;
  };
  for (std::size_t b = 0; b < sizes.size(); ++b) {
    const int node = bp.buffers[b].node;
    if (node < 0) continue;
    if (bp.buffers[b].saved || bp.buffers[b].scratch) {
      size_of(node);  // checks the node's size for overflow
      std::vector<dims_t> in;
      for (int x : plan.inputs(node)) in.push_back(dims_of(x));
      const op_entry& op = *plan.order[node]->op;
      sizes[b] = ((bp.buffers[b].saved ? op.saved_elements : op.scratch_elements)(plan.order[node]->fused,
                                                                                  dims_of(node), in) + 15) / 16 * 16;
      continue;
    }
    // inputs are read from their feeds, and a node that may grow its input's storage in place
    // (a KV cache's keys) is assumed to: its input fed with room, as nn::kv_cache feeds it
    if (!bp.buffers[b].grad && (plan.order[node]->op->role == node_role::input || m.may_append[node] >= 0)) continue;
    sizes[b] = size_of(node);
  }
  std::vector<std::int64_t> offsets;
  memory_report r;
  r.peak_bytes = static_cast<std::size_t>(detail::place_buffers(bp, sizes, offsets)) * sizeof(T);
  for (int i = 0; i < m.n; ++i) r.in_place += bp.in_place_of[i] >= 0;
  for (std::size_t b = 0; b < sizes.size(); ++b) {
    if (sizes[b] == 0) continue;
    const detail::planned_buffer& pb = bp.buffers[b];
    memory_report::buffer e;
    const auto& owners = pb.grad ? bp.grad_buf : bp.val_buf;
    int shared = 0;
    for (int i = 0; i < m.n; ++i) shared += owners[i] == static_cast<int>(b) && i != pb.node;
    e.what = plan.describe(pb.node) + (pb.saved ? " (saved for backward)" : pb.scratch ? " (backward workspace)" : "") +
             (shared ? " + " + std::to_string(shared) + " more" : "");
    e.shape = pb.saved || pb.scratch ? "(" + std::to_string(sizes[b]) + " elements)" : plan.shape_text(pb.node);
    e.grad = pb.grad;
    e.bytes = static_cast<std::size_t>(sizes[b]) * sizeof(T);
    e.offset = static_cast<std::size_t>(offsets[b]) * sizeof(T);
    e.first = pb.first;
    e.last = pb.last;
    e.kept = pb.pinned;
    r.unshared_bytes += e.bytes;
    r.buffers.push_back(std::move(e));
  }
  std::stable_sort(r.buffers.begin(), r.buffers.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  return r;
}

std::string memory_report::str(int top) const {
  if (top < 0) top = static_cast<int>(buffers.size());
  std::string s = "memory plan: arena " + mib(peak_bytes) + " for " + std::to_string(buffers.size()) +
                  " buffers of " + mib(unshared_bytes) + " (" + std::to_string(in_place) + " nodes in place)\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %10s %10s  %-5s %-9s  %s\n", "bytes", "offset", "kind", "steps", "node [dims]");
  s += line;
  for (int i = 0; i < top && i < static_cast<int>(buffers.size()); ++i) {
    const buffer& b = buffers[static_cast<std::size_t>(i)];
    char steps[32];
    std::snprintf(steps, sizeof steps, "%d-%s", b.first, b.kept ? "end" : std::to_string(b.last).c_str());
    std::snprintf(line, sizeof line, "  %10zu %10zu  %-5s %-9s  %s %s\n", b.bytes, b.offset, b.grad ? "grad" : "value",
                  steps, b.what.c_str(), b.shape.c_str());
    s += line;
  }
  return s;
}

template memory_report executor<float>::memory_plan(std::span<const std::pair<std::string_view, std::int64_t>>) const;
template memory_report executor<double>::memory_plan(std::span<const std::pair<std::string_view, std::int64_t>>) const;

}  // namespace loom
