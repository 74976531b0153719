// The executor: binds dims, allocates one arena, and runs the plan forward and backward on
// oneTBB. It knows nothing about what an op computes (that is ops/): it reads each op's entry
// (kernels and traits) and how nodes depend on each other. The jobs are in rooms: see
// executor_impl.hpp.
#include "loom/graph/executor.hpp"

#include <cstring>
#include <string>

#include <oneapi/tbb/info.h>

#include "../ops/registry.hpp"
#include "executor_impl.hpp"

namespace loom {

template <class T>
executor<T>::impl::impl(plan_view p, param_store<T>& ps, exec_options o) : plan(p), params(&ps), opts(o) {
  if (opts.inference) opts.training = false;
  n = plan.size();
  make_arena();
  leaf.resize(n);
  needs_grad.resize(n);
  kernels.resize(n);
  for (int i = 0; i < n; ++i) {
    const node_desc* d = plan.order[i];
    index.emplace(d, i);
    leaf[i] = d->op->role != node_role::op;
    needs_grad[i] = !opts.inference && (plan.from_param[i] || (opts.input_grads && plan.from_input[i]));
    kernels[i] = ops::kernels_for<T>(*d->op);
  }
  // views share their input's buffer, and their gradient too when they are its only
  // consumer (then dx = dy is the same memory)
  view_of.assign(n, -1);
  grad_view.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    if (!plan.order[i]->op->is_view) continue;
    const int x = plan.inputs(i)[0];
    view_of[i] = x;
    bool x_is_root = false;
    for (int r : plan.roots) x_is_root = x_is_root || r == x;
    grad_view[i] = needs_grad[i] && needs_grad[x] && plan.consumers(x).size() == 1 && !x_is_root;
  }
  const auto e = static_cast<std::size_t>(plan.edges());
  edge_val.resize(e);
  edge_dims.resize(e);
  edge_stride.resize(e);
  edge_grad.resize(e);
  keep.assign(n, 0);
  plan_memory();
}

template <class T>
void executor<T>::impl::plan_memory() {
  sched = detail::build_schedules(plan, leaf, needs_grad);  // the planner adds recomputation tasks
  detail::planner_input in;
  in.plan = &plan;
  in.sched = &sched;
  in.leaf = leaf;
  in.needs_grad = needs_grad;
  in.keep = keep;
  in.view_of = view_of;
  in.grad_view = grad_view;
  in.inference = opts.inference;
  in.keep_all = opts.keep_all;
  in.recompute = opts.recompute;
  buffers = detail::plan_buffers(in);
  plan_appends();
}

template <class T>
void executor<T>::impl::make_arena() {
  int t = opts.threads > 0 ? opts.threads : tbb::info::default_concurrency();
  arena = std::make_unique<tbb::task_arena>(t);
}

template <class T>
void executor<T>::impl::forward() {
  copy_strided_feeds();
  auto compute = [this](int i) { kernels[i].forward(args(i)); };
  detail::run_dag(*arena, sched.forward, compute);
  forwarded = true;
  backwarded = false;
  values_spent = false;
}

template <class T>
void executor<T>::impl::backward(std::span<const tensor<T>> cot) {
  if (opts.inference) throw error("backward: this executor was made for inference (exec_options::inference)");
  if (!forwarded) throw error("backward: call forward() first");
  if (values_spent && !opts.keep_all)
    throw error("backward: call forward() again first (the memory plan reuses the forward's values during "
                "backward; exec_options::keep_all keeps them)");
  auto roots = plan.roots;
  if (cot.size() != roots.size())
    throw shape_error("backward: " + std::to_string(cot.size()) + " cotangents given for " +
                      std::to_string(roots.size()) + " outputs");
  for (std::size_t r = 0; r < roots.size(); ++r)
    if (!(cot[r].dims() == dims[roots[r]]))
      throw shape_error("backward: cotangent " + std::to_string(r) + " has shape " + cot[r].dims().str() +
                        ", output " + std::to_string(r) + " has shape " + dims[roots[r]].str());
  // the outputs' gradients start as the cotangents; every other gradient (parameters'
  // included) is prepared by its first contributor's task (see detail::schedules)
  for (std::size_t r = 0; r < roots.size(); ++r)
    if (T* g = grad[roots[r]]) std::memset(g, 0, static_cast<std::size_t>(dims[roots[r]].size()) * sizeof(T));
  for (std::size_t r = 0; r < roots.size(); ++r) {
    T* g = grad[roots[r]];
    if (!g) continue;  // no gradient flows through this output
    for (std::int64_t e = 0; e < cot[r].size(); ++e) g[e] += cot[r][e];
  }
  // values recomputed in backward live in their second buffer (planner.hpp)
  if (!buffers.recompute.empty()) {
    for (int i = 0; i < n; ++i)
      if (buffers.val_buf_bwd[i] >= 0) val[i] = mem.get() + off_val_bwd[i];
    refresh_edges();
  }
  auto compute = [this](int i) {
    if (i >= n) {  // a recomputation task: a block's forward again
      for (int u : buffers.recompute[static_cast<std::size_t>(i - n)]) kernels[u].forward(args(u));
      return;
    }
    for (int x : sched.zero_before[i]) std::memset(grad[x], 0, static_cast<std::size_t>(dims[x].size()) * sizeof(T));
    kernels[i].backward(args(i));
  };
  values_spent = true;
  detail::run_dag(*arena, sched.backward, compute);
  backwarded = true;
}

// ---- the public class ----

template <class T>
executor<T>::executor(plan_view plan, param_store<T>& params, exec_options options)
    : p_(std::make_unique<impl>(plan, params, options)) {}
template <class T>
executor<T>::~executor() = default;
template <class T>
executor<T>::executor(executor&&) noexcept = default;
template <class T>
executor<T>& executor<T>::operator=(executor&&) noexcept = default;

template <class T>
void executor<T>::forward(std::span<const feed> feeds) {
  p_->bind(feeds);
  p_->forward();
}

template <class T>
void executor<T>::backward() {
  if (p_->opts.inference) throw error("backward: this executor was made for inference (exec_options::inference)");
  if (!p_->forwarded) throw error("backward: call forward() first");
  const auto& roots = p_->plan.roots;
  std::vector<tensor<T>> cot;
  for (std::size_t r = 0; r < roots.size(); ++r) cot.emplace_back(p_->dims[roots[r]]);
  if (cot[0].size() != 1)
    throw shape_error("backward(): output 0 has shape " + cot[0].dims().str() +
                      "; reduce it to one element (a loss) or pass cotangents");
  cot[0][0] = T(1);
  p_->backward(cot);
}

template <class T>
void executor<T>::backward(std::span<const tensor<T>> cotangents) {
  p_->backward(cotangents);
}

template <class T>
tensor_view<const T> executor<T>::value_at(int i) const {
  if (!p_->forwarded) throw error("executor: no value before forward()");
  if (p_->plan.order[i]->elem != dtype::real)
    throw error("executor: " + p_->plan.describe(i) + " is not real-valued");
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
tensor_view<const T> executor<T>::grad_at(int i) const {
  if (!p_->backwarded) throw error("executor: no gradient before backward()");
  if (!p_->grad[i])
    throw error("executor: no gradient flows to " + p_->plan.describe(i) +
                (p_->plan.order[i]->op->role == node_role::input ? " (set exec_options::input_grads)" : ""));
  if (!p_->buffers.grad_kept[i])
    throw error("executor: the gradient of " + p_->plan.describe(i) +
                " was not kept: its memory is reused once backward is past it. Call keep(node) before forward(), "
                "or set exec_options::keep_all (debugging)");
  return {p_->grad[i], p_->dims[i]};
}

template <class T>
void executor<T>::keep_at(int i) {
  if (i < 0 || i >= p_->n) throw error("executor: keep: node " + std::to_string(i) + " is not in this graph");
  if (p_->keep[i]) return;
  p_->keep[i] = 1;
  p_->plan_memory();
  p_->bound = p_->forwarded = p_->backwarded = false;  // the next forward() places buffers anew
}

template <class T>
std::size_t executor<T>::planned_bytes() const {
  return static_cast<std::size_t>(p_->planned_elems) * sizeof(T);
}

template <class T>
tensor_view<const T> executor<T>::output(int k) const {
  if (k < 0 || k >= static_cast<int>(p_->plan.roots.size()))
    throw error("executor: output " + std::to_string(k) + " does not exist (the graph has " +
                std::to_string(p_->plan.roots.size()) + ")");
  return value_at(p_->plan.roots[k]);
}

template <class T>
int executor<T>::named_index(std::string_view name) const {
  const int i = p_->plan.named_index(name);
  if (i >= 0) return i;
  std::string names;
  for (int k : p_->plan.named) names += (names.empty() ? "" : ", ") + quoted(p_->plan.order[k]->name);
  throw missing_error("executor: the graph has no output named " + quoted(name) +
                      (names.empty() ? std::string(" (it names none)") : " (its named outputs: " + names + ")"));
}

template <class T>
tensor_view<const T> executor<T>::output(std::string_view name) const {
  return value_at(named_index(name));
}

template <class T>
strided_view<const T> executor<T>::output_storage(std::string_view name) const {
  const int i = named_index(name);
  if (!p_->forwarded) throw error("executor: no value before forward()");
  if (p_->plan.order[i]->elem != dtype::real) throw error("executor: " + p_->plan.describe(i) + " is not real-valued");
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
int executor<T>::index_of(const node_desc* d) const {
  auto it = p_->index.find(d);
  if (it != p_->index.end()) return it->second;
  // a node of another type with the same structure is the same node (see detail::same_node)
  for (int i = 0; i < p_->n; ++i)
    if (detail::same_node(*p_->plan.order[i], *d)) return i;
  throw error("executor: that node is not part of this graph");
}

template <class T>
int executor<T>::input_index(std::string_view name) const {
  const int i = p_->plan.input_index(name);
  if (i < 0) throw missing_error("executor: " + quoted(name) + " is not an input of this graph");
  return i;
}

template <class T>
tensor_view<const T> executor<T>::input_grad(std::string_view name) const {
  return grad_at(input_index(name));
}

template <class T>
std::int64_t executor<T>::bound(std::string_view symbol) const {
  for (std::size_t k = 0; k < p_->plan.syms.size(); ++k)
    if (p_->plan.syms[k] == symbol) {
      if (!p_->bound) throw error("executor: no dims are bound before forward()");
      return p_->sym[k];
    }
  throw missing_error("executor: the graph has no dim " + quoted(symbol));
}

template <class T>
void executor<T>::set_threads(int threads) {
  p_->opts.threads = threads;
  p_->make_arena();
}
template <class T>
int executor<T>::threads() const {
  return p_->arena->max_concurrency();
}
template <class T>
void executor<T>::set_training(bool training) {
  p_->opts.training = training;
}
template <class T>
std::size_t executor<T>::arena_bytes() const {
  return static_cast<std::size_t>(p_->mem_elems) * sizeof(T);
}
template <class T>
const plan_view& executor<T>::plan() const {
  return p_->plan;
}

template class executor<float>;
template class executor<double>;

}  // namespace loom
