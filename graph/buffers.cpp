// Buffers: one arena for every value and gradient of computed nodes, the addresses of each
// node's buffers (parameters live in the store, inputs in their feeds, views in their input's
// buffer), and the kernels' arguments built from them.
#include <algorithm>
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
  std::vector<std::int64_t> sizes(buffers.buffers.size(), 0);
  for (std::size_t b = 0; b < sizes.size(); ++b) {
    const int node = buffers.buffers[b].node;
    if (node < 0) continue;  // merged into another buffer (in place)
    const bool input = plan.order[node]->op->role == node_role::input;
    if (!buffers.buffers[b].grad && input && !materialize[node]) continue;  // read from its feed
    sizes[b] = aligned(dims[node].size());
  }
  planned_elems = detail::place_buffers(buffers, sizes, buffer_offset);
  off_val.assign(n, 0);
  off_grad.assign(n, 0);
  off_val_bwd.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    if (buffers.val_buf[i] >= 0) off_val[i] = buffer_offset[buffers.val_buf[i]];
    if (buffers.val_buf_bwd[i] >= 0) off_val_bwd[i] = buffer_offset[buffers.val_buf_bwd[i]];
    if (buffers.grad_buf[i] >= 0) off_grad[i] = buffer_offset[buffers.grad_buf[i]];
  }
  if (mem && planned_elems <= mem_elems) return;
  const std::int64_t want = mem ? std::max(planned_elems, 2 * mem_elems) : planned_elems;
  mem.reset(new T[static_cast<std::size_t>(std::max<std::int64_t>(want, 1))]());
  mem_elems = want;
}

// The addresses of every node's value and gradient, in topological order (a view's come
// from its input's).
template <class T>
void executor<T>::impl::place_buffers() {
  for (int i = 0; i < n; ++i) {
    const node_desc* d = plan.order[i];
    if (d->op->role == node_role::param) {
      val[i] = params->value(d->name).data();
      grad[i] = params->grad(d->name).data();
    } else if (d->op->role == node_role::input) {
      // a strided feed some consumer cannot read is copied to the arena by forward()
      val[i] = materialize[i] ? mem.get() + off_val[i] : feeds[static_cast<std::size_t>(node_feed[i])].data();
      grad[i] = needs_grad[i] ? mem.get() + off_grad[i] : nullptr;
    } else if (view_of[i] >= 0) {
      val[i] = val[view_of[i]];
      grad[i] = !needs_grad[i] ? nullptr : grad_view[i] ? grad[view_of[i]] : mem.get() + off_grad[i];
    } else {
      val[i] = mem.get() + off_val[i];
      grad[i] = needs_grad[i] ? mem.get() + off_grad[i] : nullptr;
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
      edge_stride[e] = fed_stride[j] && !materialize[j] ? fed_stride[j] : (d.rank >= 2 ? d[-2] * d[-1] : d.size());
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
      std::memcpy(dst + m * mat, src + m * fed_stride[i], static_cast<std::size_t>(mat) * sizeof(T));
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
  a.out = const_cast<T*>(static_cast<const T*>(val[i]));
  a.out_dims = dims[i];
  a.dattr = dattr[i];
  a.din = std::span(edge_grad).subspan(first, count);
  a.din_fresh = std::span(sched.edge_fresh).subspan(first, count);
  a.dout = grad[i];
  a.training = opts.training;
  return a;
}

#define LOOM_BUFFERS(T)                                   \
  template void executor<T>::impl::allocate();            \
  template void executor<T>::impl::place_buffers();       \
  template void executor<T>::impl::refresh_edges();       \
  template void executor<T>::impl::copy_strided_feeds();  \
  template ops::op_args<T> executor<T>::impl::args(int) const;
LOOM_BUFFERS(float)
LOOM_BUFFERS(double)
#undef LOOM_BUFFERS

}  // namespace loom
