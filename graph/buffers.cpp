// Buffers: one arena for every value and gradient of computed nodes, the addresses of each
// node's buffers (parameters live in the store, inputs in their feeds, views in their input's
// buffer), and the kernels' arguments built from them.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "executor_impl.hpp"

namespace loom {

namespace {
std::int64_t aligned(std::int64_t elems) { return (elems + 15) / 16 * 16; }
}  // namespace

// Places every planned buffer for the bound dims (planner.hpp) and grows the arena when the
// placement does not fit: to exactly what is needed the first time, then at least twice the
// old size, so that dims growing step by step (a KV cache's P) reallocate O(log n) times.
template <class T>
void executor<T>::impl::allocate() {
  std::vector<std::int64_t>& sizes = scratch.sizes;
  sizes.assign(buffers.buffers.size(), 0);
  for (std::size_t b = 0; b < sizes.size(); ++b) {
    const int node = buffers.buffers[b].node;
    if (node < 0) continue;  // merged into another buffer (in place)
    if (buffers.buffers[b].saved || buffers.buffers[b].scratch) {
      std::vector<dims_t>& in = scratch.in;
      in.clear();
      for (int x : plan.inputs(node)) in.push_back(dims[x]);
      const op_entry& op = *plan.order[node]->op;
      sizes[b] = aligned((buffers.buffers[b].saved ? op.saved_elements : op.scratch_elements)(plan.order[node]->fused,
                                                                                              dims[node], in));
      continue;
    }
    const bool input = plan.order[node]->op->role == node_role::input;
    if (!buffers.buffers[b].grad && ((input && !materialize[node]) || appended[node])) continue;  // in its feed
    sizes[b] = aligned(dims[node].size());
  }
  // The same sizes place the same way: a decoding step whose only growing tensors live in their
  // feeds (the KV cache) keeps its placement (detail::place_buffers was 0.7% of such a step [AMD EPYC])
  if (sizes != placed_sizes) place(sizes);  // a copy, made only when the placement changes
  if (mem_ptr && planned_elems <= mem_elems) return;
  const std::int64_t want = mem_ptr ? std::max(planned_elems, 2 * mem_elems) : planned_elems;
  arena_storage = std::vector<T, arena_allocator<T>>(static_cast<std::size_t>(std::max<std::int64_t>(want, 1)));
  mem_ptr = arena_storage.data();
  mem_elems = want;
}

// Offsets for buffers of these sizes (buffer_offset, planned_elems) and of every node's buffers.
template <class T>
void executor<T>::impl::place(std::vector<std::int64_t> sizes) {
  placed_sizes.clear();  // stale until the placement below is complete
  planned_elems = detail::place_buffers(buffers, sizes, buffer_offset);
  if (check_placement) verify_placement(sizes);
  off_val.assign(n, 0);
  off_grad.assign(n, 0);
  off_val_bwd.assign(n, 0);
  off_saved.assign(n, 0);
  off_scratch.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    if (buffers.saved_buf[i] >= 0) off_saved[i] = buffer_offset[buffers.saved_buf[i]];
    if (buffers.scratch_buf[i] >= 0) off_scratch[i] = buffer_offset[buffers.scratch_buf[i]];
    if (buffers.val_buf[i] >= 0) off_val[i] = buffer_offset[buffers.val_buf[i]];
    if (buffers.val_buf_bwd[i] >= 0) off_val_bwd[i] = buffer_offset[buffers.val_buf_bwd[i]];
    if (buffers.grad_buf[i] >= 0) off_grad[i] = buffer_offset[buffers.grad_buf[i]];
  }
  placed_sizes = std::move(sizes);
}

// With LOOM_CHECK_MEMORY_PLAN set in the environment (the tests set it): every two buffers
// whose bytes overlap must have disjoint lifetimes, or allocate() throws. A check of the
// planner by its own output, for every graph a program runs.
template <class T>
void executor<T>::impl::verify_placement(std::span<const std::int64_t> sizes) const {
  const auto& bs = buffers.buffers;
  for (std::size_t a = 0; a < bs.size(); ++a)
    for (std::size_t b = a + 1; b < bs.size(); ++b) {
      if (sizes[a] == 0 || sizes[b] == 0) continue;
      const std::int64_t oa = buffer_offset[a], ob = buffer_offset[b];
      if (!(oa < ob + sizes[b] && ob < oa + sizes[a])) continue;
      const bool disjoint = (!bs[a].pinned && bs[a].last < bs[b].first) || (!bs[b].pinned && bs[b].last < bs[a].first);
      if (!disjoint)
        throw error("memory plan: the buffers of " + plan.describe(bs[a].node) + " and " + plan.describe(bs[b].node) +
                    " share bytes while both are alive (steps " + std::to_string(bs[a].first) + "-" +
                    std::to_string(bs[a].last) + " and " + std::to_string(bs[b].first) + "-" +
                    std::to_string(bs[b].last) + ")");
    }
}

// The addresses of every node's value and gradient, in topological order (a view's come
// from its input's).
template <class T>
void executor<T>::impl::place_buffers() {
  for (int i = 0; i < n; ++i) {
    const node_desc* d = plan.order[i];
    if (d->op->role == node_role::param) {
      auto* e = param_at(i);  // present: bind checked
      val[i] = e->value.data();
      grad[i] = e->grad.data();
    } else if (d->op->role == node_role::input) {
      // a strided feed some consumer cannot read is copied to the arena by forward()
      val[i] = materialize[i] ? mem_ptr + off_val[i] : feeds[static_cast<std::size_t>(node_feed[i])].data();
      grad[i] = needs_grad[i] ? mem_ptr + off_grad[i] : nullptr;
    } else if (appended[i]) {  // input 0's storage, grown in place
      val[i] = val[plan.inputs(i)[0]];
      grad[i] = needs_grad[i] ? mem_ptr + off_grad[i] : nullptr;
    } else if (view_of[i] >= 0) {
      val[i] = val[view_of[i]];
      grad[i] = !needs_grad[i] ? nullptr : grad_view[i] ? grad[view_of[i]] : mem_ptr + off_grad[i];
    } else {
      val[i] = mem_ptr + off_val[i];
      grad[i] = needs_grad[i] ? mem_ptr + off_grad[i] : nullptr;
    }
  }
  refresh_edges();
}

// Every edge's pointers, dims and strides from its source node (O(edges), no allocation).
template <class T>
void executor<T>::impl::refresh_edges() {
  for (int c = 0; c < n; ++c) {
    auto ins = plan.inputs(c);
    for (std::size_t pos = 0; pos < ins.size(); ++pos) {
      const auto e = static_cast<std::size_t>(plan.in_off[c]) + pos;
      const int j = ins[pos];
      const dims_t& d = dims[j];
      edge_val[e] = val[j];
      edge_dims[e] = d;
      edge_grad[e] = needs_grad[j] ? grad[j] : nullptr;
      edge_stride[e] = val_stride[j] ? val_stride[j] : (d.rank >= 2 ? d[-2] * d[-1] : d.size());
    }
  }
}

// Copies strided feeds that some consumer cannot read in place into their arena buffer.
template <class T>
void executor<T>::impl::copy_strided_feeds() {
  for (int i = 0; i < n; ++i) {
    if (!materialize[i]) continue;
    const feed* f = &feeds[static_cast<std::size_t>(node_feed[i])];
    const dims_t& d = dims[i];
    const std::int64_t mat = d[-2] * d[-1], count = mat ? d.size() / mat : 0;
    const T* src = static_cast<const T*>(f->data());
    T* dst = const_cast<T*>(static_cast<const T*>(val[i]));
    for (std::int64_t m = 0; m < count; ++m)
      std::memcpy(dst + m * mat, src + m * f->mat_stride(), static_cast<std::size_t>(mat) * sizeof(T));
  }
}

// What node i's kernels see: its inputs' values, dims, strides and gradients, its own.
template <class T>
ops::op_args<T> executor<T>::impl::args(int i) const {
  const auto first = static_cast<std::size_t>(plan.in_off[i]), count = plan.inputs(i).size();
  ops::op_args<T> a;
  a.node = plan.order[i];
  a.in = std::span(edge_val).subspan(first, count);
  a.in_dims = std::span(edge_dims).subspan(first, count);
  a.in_mat_stride = std::span(edge_stride).subspan(first, count);
  a.out = const_cast<T*>(static_cast<const T*>(val[i]));  // a feed's storage when appended in place
  a.out_dims = dims[i];
  a.out_mat_stride = val_stride[i];
  a.dattr = dattr[i];
  a.din = std::span(edge_grad).subspan(first, count);
  a.din_fresh = std::span(sched.edge_fresh).subspan(first, count);
  a.dout = grad[i];
  a.training = opts.training;
  a.will_backward = !opts.inference && !leaf[static_cast<std::size_t>(i)] && needs_grad[static_cast<std::size_t>(i)];
  a.bf16 = std::is_same_v<T, float> && opts.precision == compute_precision::bf16 && !float_product[static_cast<std::size_t>(i)];
  a.int8 = int8_of.empty() ? nullptr : int8_of[static_cast<std::size_t>(i)];
  if (!a.int8 && static_cast<std::size_t>(i) < kept.size()) a.kept = kept[static_cast<std::size_t>(i)].get();
  a.fused = plan.order[i]->fused;
  a.saved = buffers.saved_buf[i] >= 0 ? mem_ptr + off_saved[i] : nullptr;
  a.scratch = buffers.scratch_buf[i] >= 0 ? mem_ptr + off_scratch[i] : nullptr;
  return a;
}

// Nodes that may grow their input 0's storage in place (op_entry::appends_to_input): when that
// input is fed with room (feed::with_room), the node's value is the feed's storage and its
// kernel writes only the appended rows. Possible when the input is a fed one (not a computed
// value, which others may read), no other node overwrites the node's buffer in place, the node
// is not recomputed in backward, and every reader of its value — directly or through views of
// the same dims — reads strided values (op_entry::reads_strided).
template <class T>
void executor<T>::impl::plan_appends() {
  may_append.assign(n, -1);
  for (int c = 0; c < n; ++c) {
    const node_desc& d = *plan.order[c];
    if (leaf[c] || !d.op->appends_to_input || !d.op->appends_to_input(d) || buffers.val_buf_bwd[c] >= 0) continue;
    auto ins = plan.inputs(c);
    const int x = ins[0];
    bool ok = plan.order[x]->op->role == node_role::input && std::count(ins.begin(), ins.end(), x) == 1;
    for (int y = 0; y < n && ok; ++y) {  // c's buffer holds c and views of it only
      if (y == c || buffers.val_buf[y] != buffers.val_buf[c]) continue;
      int r = y;
      while (r != c && view_of[r] >= 0) r = view_of[r];
      ok = r == c;
    }
    std::vector<int> todo{c};
    while (!todo.empty() && ok) {
      const int u = todo.back();
      todo.pop_back();
      for (int k : plan.consumers(u)) {
        const node_desc& kd = *plan.order[k];
        auto kins = plan.inputs(k);
        for (std::size_t pos = 0; pos < kins.size(); ++pos) {
          if (kins[pos] != u) continue;
          if (pos == 0 && view_of[k] == u && same_dims(plan, k, u)) todo.push_back(k);
          else if (!kd.op->reads_strided || !kd.op->reads_strided(kd, static_cast<int>(pos))) ok = false;
        }
      }
    }
    if (ok) may_append[c] = x;
  }
}

#define LOOM_BUFFERS(T)                                   \
  template void executor<T>::impl::plan_appends();        \
  template void executor<T>::impl::allocate();            \
  template void executor<T>::impl::place(std::vector<std::int64_t>); \
  template void executor<T>::impl::verify_placement(std::span<const std::int64_t>) const; \
  template void executor<T>::impl::place_buffers();       \
  template void executor<T>::impl::refresh_edges();       \
  template void executor<T>::impl::copy_strided_feeds();  \
  template ops::op_args<T> executor<T>::impl::args(int) const;
LOOM_BUFFERS(float)
LOOM_BUFFERS(double)
#undef LOOM_BUFFERS

}  // namespace loom
