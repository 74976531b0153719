// Reading an executor's results: outputs by position and by name, kept values and gradients,
// and the lookups they use. A value the memory plan did not keep is refused with a message
// that says how to keep it.
#include <string>

#include "executor_impl.hpp"
#include "loom/graph/graph.hpp"

namespace loom {

template <class T>
tensor_view<const T> executor<T>::node_value(int i) const {
  p_->check_readable();
  if (p_->plan.order[i]->elem != dtype::real)
    throw error("executor: " + p_->plan.describe(i) + " is not real-valued");
  if (p_->plan.order[i]->op->role == node_role::param) p_->check_layout("executor");
  if (!p_->buffers.value_kept[i])
    throw error("executor: the value of " + p_->plan.describe(i) +
                " was not kept: its memory is reused once nothing needs it. Call keep(node) before forward(), "
                "make it an output of the graph, or set exec_options::keep_all (debugging)");
  if (p_->val_stride[i])
    throw error("executor: the value of " + p_->plan.describe(i) +
                " lies inside the storage of the feed it grew in place (its matrices are not contiguous); read it "
                "with output_storage()");
  return {static_cast<const T*>(p_->val[i]), p_->dims[i]};
}

template <class T>
tensor_view<const T> executor<T>::node_grad(int i) const {
  if (p_->in_use.load(std::memory_order_acquire))
    throw error("executor: a gradient read while a call on the executor is running (from another thread?)");
  if (!p_->backwarded) throw error("executor: no gradient before backward() (or the last backward() failed)");
  if (!p_->grad[i])
    throw error("executor: no gradient flows to " + p_->plan.describe(i) +
                (p_->plan.order[i]->op->role == node_role::input ? " (set exec_options::input_grads)" : ""));
  if (p_->plan.order[i]->op->role == node_role::param) p_->check_layout("executor");
  if (!p_->buffers.grad_kept[i])
    throw error("executor: the gradient of " + p_->plan.describe(i) +
                " was not kept: its memory is reused once backward is past it. Call keep(node) before forward(), "
                "or set exec_options::keep_all (debugging)");
  return {p_->grad[i], p_->dims[i]};
}

template <class T>
tensor_view<const T> executor<T>::output(int k) const {
  if (k < 0 || k >= static_cast<int>(p_->plan.roots.size()))
    throw error("executor: output " + std::to_string(k) + " does not exist (the graph has " +
                std::to_string(p_->plan.roots.size()) + ")");
  return node_value(p_->plan.roots[k]);
}

template <class T>
int executor<T>::named_node_index(std::string_view name) const {
  const int i = p_->plan.named_index(name);
  if (i >= 0) return i;
  std::string names;
  for (int k : p_->plan.named) names += (names.empty() ? "" : ", ") + in_quotes(p_->plan.order[k]->name);
  throw missing_error("executor: the graph has no output named " + in_quotes(name) +
                      (names.empty() ? std::string(" (it names none)") : " (its named outputs: " + names + ")"));
}

template <class T>
tensor_view<const T> executor<T>::output(std::string_view name) const {
  return node_value(named_node_index(name));
}

template <class T>
strided_view<const T> executor<T>::output_storage(std::string_view name) const {
  const int i = named_node_index(name);
  p_->check_readable();
  if (p_->plan.order[i]->elem != dtype::real) throw error("executor: " + p_->plan.describe(i) + " is not real-valued");
  if (p_->plan.order[i]->op->role == node_role::param) p_->check_layout("executor");
  const dims_t& d = p_->dims[i];
  const std::int64_t stride = p_->val_stride[i] ? p_->val_stride[i] : (d.rank >= 2 ? d[-2] * d[-1] : d.size());
  return {static_cast<const T*>(p_->val[i]), d, stride};
}

template <class T>
std::vector<feed> executor<T>::named_feeds() const {
  std::vector<feed> r;
  for (int i : p_->plan.named) {
    const std::string name(p_->plan.order[i]->name);
    auto v = output_storage(name);
    const std::int64_t contiguous = v.dims.rank >= 2 ? v.dims[-2] * v.dims[-1] : v.dims.size();
    if (v.mat_stride == contiguous) r.emplace_back(name, tensor_view<const T>{v.data, v.dims});
    else r.push_back(feed::strided(name, v.data, v.dims, v.mat_stride));
  }
  return r;
}

template <class T>
int executor<T>::original_node_index(const node_desc* d) const {
  auto it = p_->index.find(d);
  if (it != p_->index.end()) return it->second;
  // a node of another type with the same structure is the same node (see detail::same_node)
  for (int i = 0; i < p_->original.size(); ++i)
    if (detail::same_node(*p_->original.order[i], *d)) return i;
  throw error("executor: that node is not part of this graph");
}

template <class T>
int executor<T>::node_index(const node_desc* d) const {
  const int i = original_node_index(d);
  const int at = p_->rewritten->of_original[i];
  if (at >= 0) return at;
  throw error("executor: " + p_->original.describe(i) + " was fused into " +
              p_->plan.describe(p_->rewritten->absorbed_into[i]) +
              " and has no value of its own: keep() it before forward() to read it (that pattern then runs "
              "unfused), or set exec_options::fuse = false");
}

template <class T>
int executor<T>::input_node_index(std::string_view name) const {
  const int i = p_->plan.input_index(name);
  if (i < 0) throw missing_error("executor: " + in_quotes(name) + " is not an input of this graph");
  return i;
}

template <class T>
tensor_view<const T> executor<T>::input_grad(std::string_view name) const {
  return node_grad(input_node_index(name));
}

template <class T>
std::string executor<T>::dot() const {
  return to_dot(p_->plan);
}

#define LOOM_READOUT(T)                                                               \
  template tensor_view<const T> executor<T>::node_value(int) const;                   \
  template tensor_view<const T> executor<T>::node_grad(int) const;                    \
  template tensor_view<const T> executor<T>::output(int) const;                       \
  template tensor_view<const T> executor<T>::output(std::string_view) const;          \
  template strided_view<const T> executor<T>::output_storage(std::string_view) const; \
  template int executor<T>::named_node_index(std::string_view) const;                 \
  template std::vector<feed> executor<T>::named_feeds() const;                        \
  template int executor<T>::node_index(const node_desc*) const;                       \
  template int executor<T>::original_node_index(const node_desc*) const;              \
  template int executor<T>::input_node_index(std::string_view) const;                 \
  template tensor_view<const T> executor<T>::input_grad(std::string_view) const;      \
  template std::string executor<T>::dot() const;
LOOM_READOUT(float)
LOOM_READOUT(double)
#undef LOOM_READOUT

}  // namespace loom
