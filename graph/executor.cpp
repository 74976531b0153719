// The executor: binds dims, allocates one arena, and runs the plan forward and backward on
// oneTBB. It knows nothing about what an op computes (that is ops/): it reads each op's entry
// (kernels and traits) and how nodes depend on each other. The jobs are in rooms: see
// executor_impl.hpp.
#include "loom/graph/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <string>
#include <type_traits>

#include <oneapi/tbb/info.h>

#if defined(__x86_64__)
#include <immintrin.h>  // _mm_getcsr, _mm_setcsr
#endif

#include "../core/registry.hpp"
#include "executor_impl.hpp"

namespace loom {

namespace {
// exec_options::profile's clock: seconds since s.
using pass_clock = std::chrono::steady_clock;
double seconds_since(pass_clock::time_point s) {
  return std::chrono::duration<double>(pass_clock::now() - s).count();
}

// exec_options::subnormals on the calling thread for a scope: MXCSR's DAZ (bit 6: subnormal
// inputs read as zero) and FTZ (bit 15: subnormal results stored as zero) set, the thread's
// own MXCSR restored at the end (exceptions included). Nothing when `on` is false or off x86-64.
class subnormals_flushed {
 public:
  explicit subnormals_flushed(bool on) : on_(on) {
#if defined(__x86_64__)
    if (on_) {
      saved_ = _mm_getcsr();
      _mm_setcsr(saved_ | flush_bits);
    }
#endif
  }
  ~subnormals_flushed() {
#if defined(__x86_64__)
    if (on_) _mm_setcsr(saved_);
#endif
  }
  subnormals_flushed(const subnormals_flushed&) = delete;
  subnormals_flushed& operator=(const subnormals_flushed&) = delete;

 private:
  static constexpr unsigned flush_bits = (1u << 6) | (1u << 15);
  bool on_;
  unsigned saved_ = 0;
};

template <class T>
bool flushes(const exec_options& o) {
  return o.subnormals == subnormal_mode::flush ||
         (o.subnormals == subnormal_mode::automatic && std::is_same_v<T, float>);
}
}  // namespace

template <class T>
executor<T>::impl::impl(plan_view p, param_store<T>& ps, exec_options o) : original(p), params(&ps), opts(o) {
  if (opts.inference) opts.training = false;
  if (!std::is_same_v<T, float> && opts.precision != compute_precision::f32)
    throw value_error("executor<double>: compute_precision::bf16 is for float executors (double is the reference)");
  if (opts.weights == weight_precision::int8 && !std::is_same_v<T, float>)
    throw value_error("executor<double>: weight_precision::int8 is for float executors (double is the reference)");
  if (opts.weights == weight_precision::int8 && !opts.inference)
    throw value_error("executor: weight_precision::int8 needs exec_options::inference (int8 weights have no gradient)");
  if (opts.pack_weights && !opts.inference)
    throw value_error("executor: exec_options::pack_weights needs exec_options::inference (training changes the weights at every step)");
  make_arena();
  for (int i = 0; i < original.size(); ++i) index.emplace(original.order[i], i);
  keep_original.assign(original.size(), 0);
  adopt_plan();
  for (const std::string& name : opts.float_weights) {  // each names a weight some product reads
    bool read = false;
    for (int i = 0; i < n && !read; ++i) read = weight_of(i) == name;
    if (!read)
      throw value_error("exec_options::float_weights: \"" + name +
                        "\" is not a parameter of this graph that a product x · Wᵀ reads as its weight");
  }
}

// The plan this executor runs: the original with its fusions (unless exec_options::fuse is
// off, or keep_all), and everything derived from it. Again after keep().
template <class T>
void executor<T>::impl::adopt_plan() {
  loom::detail::check_op_ids();  // two ops of one name would share node hashes and random streams
  rewritten = detail::rewrite(original, keep_original, opts.fuse && !opts.keep_all);
  plan = rewritten->view;
  clear_profile();  // a new plan: the profile's sums start again
  n = plan.size();
  param_version = 0;  // the parameters' nodes are found again in the new plan
  int8_layout = 0;  // and the int8 weights quantized for its nodes
  packed_layout = 0;  // and the weights kept packed for them
  leaf.assign(n, 0);
  needs_grad.assign(n, 0);
  kernels.assign(n, {});
  for (int i = 0; i < n; ++i) {
    const node_desc* d = plan.order[i];
    leaf[i] = d->op->role != node_role::op;
    needs_grad[i] = !opts.inference && (plan.from_param[i] || (opts.input_grads && plan.from_input[i]));
    kernels[i] = detail::kernels_for<T>(*d->op);
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
  edge_val.assign(e, nullptr);
  edge_dims.assign(e, {});
  edge_stride.assign(e, 0);
  edge_grad.assign(e, nullptr);
  keep.assign(n, 0);
  for (int i = 0; i < original.size(); ++i)
    if (keep_original[i] && rewritten->of_original[i] >= 0) keep[rewritten->of_original[i]] = 1;
  float_product.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    const std::string_view w = weight_of(i);
    if (!w.empty())
      float_product[i] = std::find(opts.float_weights.begin(), opts.float_weights.end(), w) != opts.float_weights.end();
  }
  plan_memory();
  bound = forwarded = backwarded = false;  // the next forward() binds and places anew
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
  if (opts.threads < 0 || opts.threads > max_threads)
    throw value_error("executor: threads must be 0 (all cores) to " + std::to_string(max_threads) + ", got " +
                      std::to_string(opts.threads));
  int t = opts.threads > 0 ? opts.threads : tbb::info::default_concurrency();
  arena = std::make_unique<tbb::task_arena>(t);
  // the arena's worker threads take the floating-point settings of the thread that initializes it
  const subnormals_flushed mode(flushes<T>(opts));
  arena->initialize();
}

template <class T>
void executor<T>::impl::forward() {
  // Until the run completes, the values are partial: a kernel that throws (a token id out of
  // range, say) leaves nothing that backward() or output() may read.
  forwarded = backwarded = false;
  forward_failed = true;
  copy_strided_feeds();
  const bool timing = opts.profile;  // each kernel timed (profile.cpp)
  if (timing) start_clocks();
  const auto t0 = timing ? pass_clock::now() : pass_clock::time_point{};
  auto compute = [this, timing](int i) {
    const auto s = timing ? pass_clock::now() : pass_clock::time_point{};
    kernels[i].forward(args(i));
    if (timing) {
      clocks[i].forward += seconds_since(s);
      ++clocks[i].forwards;
    }
  };
  {
    const subnormals_flushed mode(flushes<T>(opts));
    detail::run_dag(*arena, sched.forward, compute);
  }
  if (timing) {
    forward_wall += seconds_since(t0);
    ++forward_passes;
  }
  forward_failed = false;
  forwarded = true;
  values_spent = false;
}

// The parameters' memory may have moved since the last bind (param_store::layout_version:
// a parameter added or set to another shape, the store packed or assigned): the values the
// forward read and the gradients backward would write are no longer the store's. Refuse.
template <class T>
void executor<T>::impl::check_layout(const char* what) const {
  if (params->layout_version() != bound_layout)
    throw error(std::string(what) +
                ": the parameter store's layout changed after forward() (a parameter added or set to another shape, "
                "the store packed or assigned), so the parameters' memory moved; call forward() again first");
}

template <class T>
void executor<T>::impl::backward(std::span<const tensor<T>> cot) {
  if (opts.inference) throw error("backward: this executor was made for inference (exec_options::inference)");
  if (forward_failed)
    throw error("backward: the last forward() failed inside a kernel, so its values are incomplete; call forward() "
                "again first");
  if (!forwarded) throw error("backward: call forward() first");
  check_layout("backward");
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
  // a leaf that is an output and feeds nothing has its final gradient already
  if (gradient_final)
    for (auto r = roots.begin(); r != roots.end(); ++r)
      if (leaf[*r] && grad[*r] && plan.consumers(*r).empty() && std::find(roots.begin(), r, *r) == r)
        gradient_final(*r);
  // values recomputed in backward live in their second buffer (planner.hpp)
  if (!buffers.recompute.empty()) {
    for (int i = 0; i < n; ++i)
      if (buffers.val_buf_bwd[i] >= 0) val[i] = mem_ptr + off_val_bwd[i];
    refresh_edges();
  }
  const bool timing = opts.profile;  // each kernel timed (profile.cpp)
  if (timing) start_clocks();
  auto compute = [this, timing](int i) {
    if (i >= n) {  // a recomputation task: a block's forward again
      for (int u : buffers.recompute[static_cast<std::size_t>(i - n)]) {
        const auto s = timing ? pass_clock::now() : pass_clock::time_point{};
        kernels[u].forward(args(u));
        if (timing) {
          clocks[u].recompute += seconds_since(s);
          ++clocks[u].recomputes;
        }
      }
      return;
    }
    const auto s = timing ? pass_clock::now() : pass_clock::time_point{};
    for (int x : sched.zero_before[i]) std::memset(grad[x], 0, static_cast<std::size_t>(dims[x].size()) * sizeof(T));
    kernels[i].backward(args(i));
    if (timing) {
      clocks[i].backward += seconds_since(s);
      ++clocks[i].backwards;
    }
    if (gradient_final)
      for (int x : sched.leaf_grads_final[i]) gradient_final(x);
  };
  values_spent = true;
  backwarded = false;
  const auto t0 = timing ? pass_clock::now() : pass_clock::time_point{};
  {
    const subnormals_flushed mode(flushes<T>(opts));
    detail::run_dag(*arena, sched.backward, compute);
  }
  if (timing) {
    backward_wall += seconds_since(t0);
    ++backward_passes;
  }
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
  busy_guard busy(p_->in_use, "forward()");
  p_->bind(feeds);
  p_->forward();
}

template <class T>
void executor<T>::backward() {
  busy_guard busy(p_->in_use, "backward()");
  if (p_->opts.inference) throw error("backward: this executor was made for inference (exec_options::inference)");
  if (p_->forward_failed || !p_->forwarded) return p_->backward({});  // refused there, with the reason
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
  busy_guard busy(p_->in_use, "backward()");
  p_->backward(cotangents);
}

template <class T>
void executor<T>::keep_at(int i) {
  if (i < 0 || i >= p_->n) throw error("executor: keep: node " + std::to_string(i) + " is not in this graph");
  keep_original_node(p_->rewritten->to_original[i]);
}

// keep(node) and keep_at(i) both come here: it re-plans, so no other call may be running.
template <class T>
void executor<T>::keep_original_node(int i) {
  busy_guard busy(p_->in_use, "keep()");
  if (i < 0 || i >= p_->original.size()) throw error("executor: keep: node " + std::to_string(i) + " is not in this graph");
  if (p_->keep_original[i]) return;
  p_->keep_original[i] = 1;
  p_->adopt_plan();  // a kept node is neither fused away nor shared
}

template <class T>
std::size_t executor<T>::planned_bytes() const {
  return static_cast<std::size_t>(p_->planned_elems) * sizeof(T);
}

template <class T>
std::int64_t executor<T>::bound(std::string_view symbol) const {
  for (std::size_t k = 0; k < p_->plan.syms.size(); ++k)
    if (p_->plan.syms[k] == symbol) {
      if (!p_->bound) throw error("executor: no dims are bound before forward()");
      return p_->sym[k];
    }
  throw missing_error("executor: the graph has no dim " + in_quotes(symbol));
}

template <class T>
dims_t executor<T>::dims(int node) const {
  if (node < 0 || node >= p_->plan.size())
    throw error("executor::dims: node " + std::to_string(node) + " is not in the plan (it has " +
                std::to_string(p_->plan.size()) + " nodes)");
  if (!p_->bound) throw error("executor: no dims are bound before forward()");
  return p_->dims[static_cast<std::size_t>(node)];
}

template <class T>
void executor<T>::on_gradient_final(std::function<void(int node)> callback) {
  p_->gradient_final = std::move(callback);
}

template <class T>
void executor<T>::requantize() {
  busy_guard busy(p_->in_use, "requantize()");
  p_->int8_layout = 0;  // no store has layout 0: the next forward() binds in full and quantizes
  p_->packed_layout = 0;  // and the kernels pack their weights again
}

template <class T>
void executor<T>::set_threads(int threads) {
  busy_guard busy(p_->in_use, "set_threads()");
  const int before = p_->opts.threads;
  p_->opts.threads = threads;
  try {
    p_->make_arena();
  } catch (...) {
    p_->opts.threads = before;
    throw;
  }
}
template <class T>
int executor<T>::threads() const {
  return p_->arena->max_concurrency();
}
template <class T>
void executor<T>::set_training(bool training) {
  busy_guard busy(p_->in_use, "set_training()");
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

bool exec_options::fuse_by_default() {
  static const bool on = [] {
    const char* v = std::getenv("LOOM_FUSE");
    return !(v && std::string_view(v) == "0");
  }();
  return on;
}

template class executor<float>;
template class executor<double>;

}  // namespace loom
