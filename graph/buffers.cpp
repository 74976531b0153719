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

// Sizes the arena for the bound dims. It grows only when a buffer does not fit.
template <class T>
void executor<T>::impl::allocate() {
  bool grow = cap_val.empty();
  std::vector<std::int64_t> want_val(n, 0), want_grad(n, 0);
  for (int i = 0; i < n; ++i) {
    const bool input = plan.order[i]->op->role == node_role::input;
    if ((!leaf[i] && view_of[i] < 0) || materialize[i]) want_val[i] = aligned(dims[i].size());
    if ((!leaf[i] || input) && needs_grad[i] && !grad_view[i]) want_grad[i] = aligned(dims[i].size());
  }
  if (!grow)
    for (int i = 0; i < n; ++i) grow = grow || want_val[i] > cap_val[i] || want_grad[i] > cap_grad[i];
  if (!grow) return;
  cap_val.resize(n, 0);
  cap_grad.resize(n, 0);
  off_val.assign(n, 0);
  off_grad.assign(n, 0);
  std::int64_t total = 0;
  // A buffer that must grow gets twice what it needs (rounded to a power of two), so that
  // dims growing step by step (a KV cache's P) reallocate O(log n) times, not every step.
  auto grown = [](std::int64_t cap, std::int64_t want) {
    if (want <= cap) return cap;
    std::int64_t c = 16;
    while (c < want) c *= 2;
    return cap == 0 ? want : c;  // the first allocation is exact
  };
  for (int i = 0; i < n; ++i) {
    cap_val[i] = grown(cap_val[i], want_val[i]);
    off_val[i] = total;
    total += cap_val[i];
  }
  for (int i = 0; i < n; ++i) {
    cap_grad[i] = grown(cap_grad[i], want_grad[i]);
    off_grad[i] = total;
    total += cap_grad[i];
  }
  mem.reset(new T[static_cast<std::size_t>(std::max<std::int64_t>(total, 1))]());
  mem_elems = total;
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
