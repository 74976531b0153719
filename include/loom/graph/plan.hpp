// The compile-time plan of a graph: unique nodes in topological order, their inputs and
// consumers, the symbols of its dynamic dims, and which nodes gradients flow through.
//
// Everything here is constexpr code over arrays of node descriptors (not type-level
// recursion), so its cost grows near-linearly with the number of nodes. A plan is computed
// once per graph type by graph<Outs...> and handed to the executor as a plan_view.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/node_desc.hpp"

namespace loom {

/// A dim of a node at run time: constant + Σ bound values of symbols (indices into syms).
struct plan_dim {
  long constant = 0;
  int n_syms = 0;
  std::array<short, max_dim_terms> sym{};

  /// Its value when the dynamic dims take `values` (indexed as plan_view::syms): constant + Σ
  /// its symbols' values, or nothing when that sum overflows int64.
  std::optional<std::int64_t> value(std::span<const std::int64_t> values) const {
    std::int64_t v = constant;
    for (int k = 0; k < n_syms; ++k)
      if (__builtin_add_overflow(v, values[static_cast<std::size_t>(sym[static_cast<std::size_t>(k)])], &v))
        return std::nullopt;
    return v;
  }
};

/// Per node: its dims, then its two dim attributes (slice begin and size).
using plan_dims = std::array<plan_dim, max_rank + 2>;

/// A type-erased view of a plan; what the executor, gradcheck and the DOT writer read.
struct plan_view {
  std::span<const node_desc* const> order;   // nodes, inputs before consumers
  std::span<const int> in_off, in_idx;       // inputs of node i: in_idx[in_off[i] .. in_off[i+1])
  std::span<const int> out_off, out_idx;     // distinct consumers of node i, ascending
  std::span<const std::string_view> syms;    // names of the dynamic dims
  std::span<const plan_dims> dims;           // dims of node i in terms of syms
  std::span<const int> roots;                // the graph's outputs, as node indices
  std::span<const int> named;                // nodes readable by name (named<"...">), by name
  std::span<const std::uint8_t> from_param;  // 1 if node i depends on a parameter
  std::span<const std::uint8_t> from_input;  // 1 if node i depends on a real-valued input

  int size() const { return static_cast<int>(order.size()); }
  /// Number of input edges over all nodes (node i's are in_idx[in_off[i] .. in_off[i+1])).
  int edges() const { return in_off.empty() ? 0 : in_off.back(); }
  std::span<const int> inputs(int i) const { return in_idx.subspan(in_off[i], in_off[i + 1] - in_off[i]); }
  std::span<const int> consumers(int i) const { return out_idx.subspan(out_off[i], out_off[i + 1] - out_off[i]); }
  /// Index of the input node named `name`, or -1.
  int input_index(std::string_view name) const;
  /// Index of the node named `name` with named<"...">(x) (an output read by name), or -1.
  int named_index(std::string_view name) const;
  /// Whether the named node `node` is a state: an input of the same name exists (its value
  /// before the step; the named node is its value after).
  bool is_state(int node) const;
  /// Node i's dims in terms of the symbols: "[B, T, 64]", "[B, 2, P + T, 16]".
  std::string shape_text(int i) const;
  /// What node i is, for messages: `input "x"`, `parameter "w"`, `matmul (node 7)`.
  std::string describe(int i) const;
};

/// Two dims of a plan are the same expression (constant and symbols).
inline bool same_dim(const plan_dim& a, const plan_dim& b) {
  if (a.constant != b.constant || a.n_syms != b.n_syms) return false;
  for (int s = 0; s < a.n_syms; ++s)
    if (a.sym[s] != b.sym[s]) return false;
  return true;
}

/// Nodes a and b of plan p have the same shape (rank and every dim).
inline bool same_dims(const plan_view& p, int a, int b) {
  if (p.order[a]->rank != p.order[b]->rank) return false;
  for (int k = 0; k < p.order[a]->rank; ++k)
    if (!same_dim(p.dims[a][k], p.dims[b][k])) return false;
  return true;
}

namespace detail {

/// Whether two descriptors describe the same node: the same op, attributes, dims and name,
/// and inputs with the same structural hashes. Node identity in the plan is structural
/// (a Merkle hash, then this check) rather than by address: GCC cannot compare the addresses
/// of descriptors in constant expressions under -fsanitize=address, and two node types with
/// the same structure (say, a bool and a uint8_t mask input of one name) are one node anyway.
constexpr bool same_node(const node_desc& a, const node_desc& b) {
  if (a.hash != b.hash || a.op->id != b.op->id || a.elem != b.elem || a.name != b.name || a.rank != b.rank ||
      a.init != b.init || a.inputs.size() != b.inputs.size())
    return false;
  for (int i = 0; i < a.rank; ++i)
    if (!(a.dims[i] == b.dims[i])) return false;
  for (std::size_t i = 0; i < a.iattr.size(); ++i)
    if (a.iattr[i] != b.iattr[i]) return false;
  for (std::size_t i = 0; i < a.fattr.size(); ++i)
    if (a.fattr[i] != b.fattr[i]) return false;
  for (std::size_t i = 0; i < a.dattr.size(); ++i)
    if (!(a.dattr[i] == b.dattr[i])) return false;
  for (std::size_t i = 0; i < a.inputs.size(); ++i)
    if (a.inputs[i]->hash != b.inputs[i]->hash) return false;
  return true;
}

/// Open-addressing map from node (by structure, see same_node) to topological index, usable
/// in constexpr.
class desc_index {
 public:
  constexpr desc_index() : keys_(64, nullptr), vals_(64, -1), used_(64, 0) {}
  constexpr int find(const node_desc* d) const {
    std::size_t mask = keys_.size() - 1;
    for (std::size_t i = d->hash & mask;; i = (i + 1) & mask) {
      if (!used_[i]) return -1;
      if (same_node(*keys_[i], *d)) return vals_[i];
    }
  }
  constexpr void insert(const node_desc* d, int v) {
    if (2 * (count_ + 1) > keys_.size()) grow();
    place(d, v);
    ++count_;
  }
  constexpr void set(const node_desc* d, int v) {
    std::size_t mask = keys_.size() - 1;
    for (std::size_t i = d->hash & mask;; i = (i + 1) & mask)
      if (used_[i] && same_node(*keys_[i], *d)) {
        vals_[i] = v;
        return;
      }
  }

 private:
  constexpr void place(const node_desc* d, int v) {
    std::size_t mask = keys_.size() - 1;
    std::size_t i = d->hash & mask;
    while (used_[i]) i = (i + 1) & mask;
    keys_[i] = d;
    vals_[i] = v;
    used_[i] = 1;
  }
  constexpr void grow() {
    std::vector<const node_desc*> old_keys = std::move(keys_);
    std::vector<int> old_vals = std::move(vals_);
    std::vector<unsigned char> old_used = std::move(used_);
    keys_.assign(old_keys.size() * 2, nullptr);
    vals_.assign(old_keys.size() * 2, -1);
    used_.assign(old_keys.size() * 2, 0);
    for (std::size_t i = 0; i < old_keys.size(); ++i)
      if (old_used[i]) place(old_keys[i], old_vals[i]);
  }
  std::vector<const node_desc*> keys_;
  std::vector<int> vals_;
  std::vector<unsigned char> used_;
  std::size_t count_ = 0;
};

/// Post-order DFS from the roots: every node after all of its inputs, each node once.
constexpr std::vector<const node_desc*> topological_order(std::span<const node_desc* const> roots,
                                                          desc_index& index) {
  std::vector<const node_desc*> order;
  struct frame {
    const node_desc* d;
    std::size_t next;
  };
  std::vector<frame> stack;
  for (const node_desc* r : roots) {
    if (index.find(r) != -1) continue;
    index.insert(r, -2);  // on the stack
    stack.push_back({r, 0});
    while (!stack.empty()) {
      frame& top = stack.back();
      if (top.next < top.d->inputs.size()) {
        const node_desc* child = top.d->inputs[top.next++];
        if (index.find(child) == -1) {
          index.insert(child, -2);
          stack.push_back({child, 0});
        }
      } else {
        index.set(top.d, static_cast<int>(order.size()));
        order.push_back(top.d);
        stack.pop_back();
      }
    }
  }
  return order;
}

constexpr void collect_syms(const dim_expr& e, std::vector<std::string_view>& syms) {
  for (int k = 0; k < e.n_syms; ++k) {
    bool seen = false;
    for (auto s : syms) seen = seen || s == e.syms[k];
    if (!seen) syms.push_back(e.syms[k]);
  }
}

struct plan_sizes {
  int nodes = 0, edges = 0, syms = 0, named = 0;
  bool names_unique = true;  // no two named nodes share a name
};

constexpr plan_sizes measure(std::span<const node_desc* const> roots) {
  desc_index index;
  auto order = topological_order(roots, index);
  plan_sizes s;
  s.nodes = static_cast<int>(order.size());
  std::vector<std::string_view> syms;
  std::vector<std::string_view> names;
  for (const node_desc* d : order) {
    s.edges += static_cast<int>(d->inputs.size());
    for (int a = 0; a < d->rank; ++a) collect_syms(d->dims[a], syms);
    for (const auto& e : d->dattr) collect_syms(e, syms);
    if (d->op->is_named_output) {
      for (auto seen : names) s.names_unique = s.names_unique && seen != d->name;
      names.push_back(d->name);
    }
  }
  s.syms = static_cast<int>(syms.size());
  s.named = static_cast<int>(names.size());
  return s;
}

/// Writes a plan's edges node by node in topological order, as build_plan does at compile time
/// (into its arrays) and rewrite() (graph/rewrite.cpp) at run time (into vectors sized for the
/// edges): each node's inputs (in_off, in_idx), its distinct consumers (out_off, out_idx, by
/// finish()), and whether it depends on a parameter (from_param) or on a real-valued input
/// (from_input), itself or through its inputs.
struct edge_writer {
  std::span<int> in_off, in_idx;
  std::span<std::uint8_t> from_param, from_input;
  std::vector<std::vector<int>> consumers;
  int nodes = 0, edges = 0;

  constexpr edge_writer(std::span<int> in_off_, std::span<int> in_idx_, std::span<std::uint8_t> from_param_,
                        std::span<std::uint8_t> from_input_)
      : in_off(in_off_), in_idx(in_idx_), from_param(from_param_), from_input(from_input_),
        consumers(from_param_.size()) {}
  /// The next node, described by d; each_input(f) calls f with the index of each of its inputs
  /// (nodes written before it), in order.
  template <class EachInput>
  constexpr void add(const node_desc& d, EachInput each_input) {
    const int at = nodes++;
    in_off[at] = edges;
    bool param = d.op->role == node_role::param;
    bool input = d.op->role == node_role::input && d.elem == dtype::real;
    each_input([&](int j) {
      in_idx[edges++] = j;
      auto& c = consumers[static_cast<std::size_t>(j)];
      if (c.empty() || c.back() != at) c.push_back(at);
      param = param || from_param[j];
      input = input || from_input[j];
    });
    from_param[at] = param;
    from_input[at] = input;
  }
  /// Once every node is written: closes in_off and lays the consumers out in out_off, out_idx
  /// (nodes + 1 and at most `edges` elements). Returns the number of consumer entries.
  constexpr int finish(std::span<int> out_off, std::span<int> out_idx) {
    in_off[nodes] = edges;
    int o = 0;
    for (int i = 0; i < nodes; ++i) {
      out_off[i] = o;
      for (int c : consumers[static_cast<std::size_t>(i)]) out_idx[o++] = c;
    }
    out_off[nodes] = o;
    return o;
  }
};

template <int N, int E, int S, int R, int M>
struct plan_data {
  std::array<const node_desc*, N> order{};
  std::array<int, N + 1> in_off{};
  std::array<int, E> in_idx{};
  std::array<int, N + 1> out_off{};
  std::array<int, E> out_idx{};  // distinct consumers; at most E of them
  std::array<std::string_view, S> syms{};
  std::array<plan_dims, N> dims{};
  std::array<int, R> roots{};
  std::array<int, M> named{};
  std::array<std::uint8_t, N> from_param{};
  std::array<std::uint8_t, N> from_input{};
};

constexpr plan_dim to_plan_dim(const dim_expr& e, std::span<const std::string_view> syms) {
  plan_dim p;
  p.constant = e.constant;
  p.n_syms = e.n_syms;
  for (int k = 0; k < e.n_syms; ++k)
    for (std::size_t s = 0; s < syms.size(); ++s)
      if (syms[s] == e.syms[k]) p.sym[k] = static_cast<short>(s);
  return p;
}

template <int N, int E, int S, int R, int M>
constexpr plan_data<N, E, S, R, M> build_plan(std::span<const node_desc* const> roots) {
  plan_data<N, E, S, R, M> p;
  desc_index index;
  auto order = topological_order(roots, index);
  std::vector<std::string_view> syms;
  for (const node_desc* d : order) {
    for (int a = 0; a < d->rank; ++a) collect_syms(d->dims[a], syms);
    for (const auto& e : d->dattr) collect_syms(e, syms);
  }
  for (int s = 0; s < S; ++s) p.syms[s] = syms[s];

  edge_writer edges(p.in_off, p.in_idx, p.from_param, p.from_input);
  for (int i = 0; i < N; ++i) {
    const node_desc* d = order[i];
    p.order[i] = d;
    edges.add(*d, [&](auto&& f) {
      for (const node_desc* in : d->inputs) f(index.find(in));
    });
    for (int a = 0; a < d->rank; ++a) p.dims[i][a] = to_plan_dim(d->dims[a], p.syms);
    p.dims[i][max_rank] = to_plan_dim(d->dattr[0], p.syms);
    p.dims[i][max_rank + 1] = to_plan_dim(d->dattr[1], p.syms);
  }
  edges.finish(p.out_off, p.out_idx);
  for (int r = 0; r < R; ++r) p.roots[r] = index.find(roots[r]);
  int m = 0;  // named nodes, sorted by name
  for (int i = 0; i < N; ++i)
    if (p.order[i]->op->is_named_output) p.named[m++] = i;
  for (int a = 1; a < M; ++a)
    for (int b = a; b > 0 && p.order[p.named[b]]->name < p.order[p.named[b - 1]]->name; --b) {
      const int t = p.named[b];
      p.named[b] = p.named[b - 1];
      p.named[b - 1] = t;
    }
  return p;
}

template <int N, int E, int S, int R, int M>
plan_view view_of(const plan_data<N, E, S, R, M>& p) {
  return {p.order,  p.in_off, p.in_idx, p.out_off,    p.out_idx,   p.syms,
          p.dims,   p.roots,  p.named,  p.from_param, p.from_input};
}

}  // namespace detail
}  // namespace loom
