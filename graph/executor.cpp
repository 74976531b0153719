// The executor: binds dims, allocates one arena, and runs the plan forward and backward on
// oneTBB. It knows nothing about what an op computes (that is ops/), only how nodes depend on
// each other.
#include "loom/graph/executor.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <unordered_map>

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include "../ops/kernel.hpp"
#include "../ops/parallel.hpp"

namespace loom {
namespace {

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

bool is_leaf(const node_desc* d) { return d->kind == op_kind::input || d->kind == op_kind::param; }

storage storage_for(dtype t, bool is_double) {
  switch (t) {
    case dtype::real: return is_double ? storage::f64 : storage::f32;
    case dtype::i32: return storage::i32;
    case dtype::u8: return storage::u8;
  }
  return storage::f32;
}

/// A DAG of tasks run with atomic dependency counts on a task_group; a finished task runs
/// one ready successor itself and spawns the others.
struct dag {
  std::vector<std::vector<int>> succ;
  std::vector<int> pending0;
  std::vector<int> start;
  std::unique_ptr<std::atomic<int>[]> pending;  // the counters of a run, allocated once

  void finish() { pending.reset(new std::atomic<int>[pending0.size()]); }
};

template <class Fn>
void run_dag(tbb::task_arena& arena, dag& g, Fn&& fn) {
  if (g.start.empty()) return;
  std::atomic<int>* pending = g.pending.get();
  for (std::size_t i = 0; i < g.pending0.size(); ++i) pending[i].store(g.pending0[i], std::memory_order_relaxed);
  arena.execute([&] {
    tbb::task_group tasks;
    struct runner {
      const dag* g;
      std::atomic<int>* pending;
      tbb::task_group* tasks;
      std::remove_reference_t<Fn>* fn;
      int node;
      void operator()() const {
        int i = node;
        while (i >= 0) {
          (*fn)(i);
          int next = -1;
          for (int c : g->succ[i])
            if (pending[c].fetch_sub(1, std::memory_order_acq_rel) == 1) {
              if (next < 0) next = c;
              else tasks->run(runner{g, pending, tasks, fn, c});
            }
          i = next;
        }
      }
    };
    for (int s : g.start) tasks.run(runner{&g, pending, &tasks, &fn, s});
    tasks.wait();
  });
}

}  // namespace

template <class T>
struct executor<T>::impl {
  plan_view plan;
  param_store<T>* params;
  exec_options opts;
  std::unique_ptr<tbb::task_arena> arena;
  int n = 0;
  std::vector<std::uint8_t> leaf, needs_grad;
  std::unordered_map<const node_desc*, int> index;
  dag fwd, bwd;
  std::vector<std::vector<int>> zero_before;  // gradients a backward task zeroes before it runs
  std::vector<int> view_of;                 // reshape nodes: the node whose buffer they share
  std::vector<std::uint8_t> grad_view;      // 1 when a view also shares its input's gradient

  // state of the last successful bind
  bool bound = false, forwarded = false, backwarded = false;
  std::vector<std::int64_t> sym;
  std::vector<dims_t> dims;
  std::vector<std::array<std::int64_t, 2>> dattr;
  std::vector<const void*> val;
  std::vector<T*> grad;
  std::vector<feed> feeds;
  std::vector<int> node_feed;                // per input node: index of its feed in `feeds`
  std::vector<std::int64_t> fed_stride;      // per input node: matrix stride of its feed (0: contiguous)
  std::vector<std::uint8_t> materialize;     // per input node: copy the strided feed into the arena

  // the kernels' view of every input edge (node i's are [in_off[i], in_off[i+1]) of the plan),
  // allocated once and refreshed from val, grad and dims after each bind
  std::vector<const void*> edge_val;
  std::vector<dims_t> edge_dims;
  std::vector<std::int64_t> edge_stride;
  std::vector<T*> edge_grad;
  std::vector<std::uint8_t> edge_fresh;  // first contribution to that gradient (op_args::din_fresh)

  // the arena: every value and gradient buffer of computed nodes (and of inputs when asked)
  std::vector<std::int64_t> cap_val, cap_grad, off_val, off_grad;
  std::unique_ptr<T[]> mem;
  std::int64_t mem_elems = 0;

  impl(plan_view p, param_store<T>& ps, exec_options o) : plan(p), params(&ps), opts(o) {
    if (opts.inference) opts.training = false;
    n = plan.size();
    make_arena();
    leaf.resize(n);
    needs_grad.resize(n);
    for (int i = 0; i < n; ++i) {
      const node_desc* d = plan.order[i];
      index.emplace(d, i);
      leaf[i] = is_leaf(d);
      needs_grad[i] = !opts.inference && (plan.from_param[i] || (opts.input_grads && plan.from_input[i]));
    }
    // reshape nodes are views: their value is their input's buffer, and so is their gradient
    // when they are its only consumer (then dx = dy is the same memory)
    view_of.assign(n, -1);
    grad_view.assign(n, 0);
    for (int i = 0; i < n; ++i) {
      if (plan.order[i]->kind != op_kind::reshape) continue;
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
    edge_fresh.assign(e, 0);
    build_schedules();
  }

  // Every edge's pointers, dims and strides from its source node (O(edges), no allocation).
  void refresh_edges() {
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

  // The addresses of every node's value and gradient, in topological order (a view's come
  // from its input's).
  void place_buffers() {
    for (int i = 0; i < n; ++i) {
      const node_desc* d = plan.order[i];
      if (d->kind == op_kind::param) {
        val[i] = params->value(d->name).data();
        grad[i] = params->grad(d->name).data();
      } else if (d->kind == op_kind::input) {
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

  // True when `given` binds exactly as the last successful bind (same names, types, shapes and
  // strides, and the parameters' storage unchanged): then only input addresses need updating.
  bool same_binding(std::span<const feed> given) const {
    if (!bound || given.size() != feeds.size()) return false;
    for (std::size_t k = 0; k < given.size(); ++k) {
      const feed& a = given[k];
      const feed& b = feeds[k];
      if (a.name() != b.name() || a.type() != b.type() || !(a.dims() == b.dims()) || a.mat_stride() != b.mat_stride())
        return false;
    }
    for (int i = 0; i < n; ++i) {
      const node_desc* d = plan.order[i];
      if (d->kind != op_kind::param) continue;
      if (!params->contains(d->name)) return false;
      const tensor<T>& v = params->value(d->name);
      if (v.data() != val[i] || params->grad(d->name).data() != grad[i] || !(v.dims() == dims[i])) return false;
    }
    return true;
  }

  // The fast path of bind(): new data, same shapes (same_binding() holds, so the same node
  // receives each feed position as before).
  void rebind_inputs(std::span<const feed> given) {
    feeds.assign(given.begin(), given.end());
    place_buffers();
  }

  void make_arena() {
    int t = opts.threads > 0 ? opts.threads : tbb::info::default_concurrency();
    arena = std::make_unique<tbb::task_arena>(t);
  }

  void build_schedules() {
    // forward: a computed node waits for its computed inputs
    fwd.succ.assign(n, {});
    fwd.pending0.assign(n, 0);
    for (int i = 0; i < n; ++i) {
      if (leaf[i]) continue;
      std::set<int> deps;
      for (int j : plan.inputs(i))
        if (!leaf[j]) deps.insert(j);
      fwd.pending0[i] = static_cast<int>(deps.size());
      for (int j : deps) fwd.succ[j].push_back(i);
      if (deps.empty()) fwd.start.push_back(i);
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
    // each gradient buffer is zeroed by the task of its first contributor, just before that
    // task adds to it: the consumer with the largest index (consumers run in descending
    // order); the outputs' own gradients are zeroed before the seeds are added
    zero_before.assign(n, {});
    std::vector<std::uint8_t> is_root(n, 0);
    for (int r : plan.roots) is_root[r] = 1;
    // ... unless that contributor's kernel stores its first contribution itself (writes_fresh)
    for (int x = 0; x < n; ++x) {
      auto cons = plan.consumers(x);
      if (!needs_grad[x] || is_root[x] || cons.empty()) continue;
      const int c = cons.back();
      if (ops::kernel<T>(plan.order[c]->kind).writes_fresh) {
        auto ins = plan.inputs(c);
        for (std::size_t pos = 0; pos < ins.size(); ++pos)
          if (ins[pos] == x) {
            edge_fresh[static_cast<std::size_t>(plan.in_off[c]) + pos] = 1;  // the first position only
            break;
          }
      } else {
        zero_before[c].push_back(x);
      }
    }
    bwd.succ.assign(n, {});
    bwd.pending0.assign(n, 0);
    for (int i = n - 1; i >= 0; --i) {
      if (leaf[i] || !needs_grad[i]) continue;
      bwd.pending0[i] = static_cast<int>(preds[i].size());
      for (int c : preds[i]) bwd.succ[c].push_back(i);
      if (preds[i].empty()) bwd.start.push_back(i);
    }
    fwd.finish();
    bwd.finish();
  }

  // ---- binding ----

  std::int64_t eval(const plan_dim& d, const std::vector<std::int64_t>& s) const {
    std::int64_t v = d.constant;
    for (int k = 0; k < d.n_syms; ++k) v += s[static_cast<std::size_t>(d.sym[k])];
    return v;
  }

  void bind(std::span<const feed> given) {
    if (same_binding(given)) {
      rebind_inputs(given);
      return;
    }
    constexpr bool is_double = std::is_same_v<T, double>;
    // 1. every feed names an input, every input is fed, types agree
    std::vector<const feed*> fed(n, nullptr);
    std::vector<int> feed_at(n, -1);
    for (const feed& f : given) {
      const int found = plan.input_index(f.name());
      if (found < 0) {
        std::string names;
        for (int i = 0; i < n; ++i)
          if (plan.order[i]->kind == op_kind::input) names += (names.empty() ? "" : ", ") + quoted(plan.order[i]->name);
        throw missing_error("forward: " + quoted(f.name()) + " is not an input of this graph (its inputs: " + names +
                            ")");
      }
      if (fed[found]) throw missing_error("forward: input " + quoted(f.name()) + " was given twice");
      fed[found] = &f;
      feed_at[found] = static_cast<int>(&f - given.data());
    }
    std::string missing;
    for (int i = 0; i < n; ++i)
      if (plan.order[i]->kind == op_kind::input && !fed[i]) missing += (missing.empty() ? "" : ", ") + quoted(plan.order[i]->name);
    if (!missing.empty()) throw missing_error("forward: missing input(s) " + missing);
    for (int i = 0; i < n; ++i) {
      if (!fed[i]) continue;
      storage want = storage_for(plan.order[i]->elem, is_double);
      if (fed[i]->type() != want)
        throw shape_error("forward: input " + quoted(plan.order[i]->name) + " must be a tensor of " +
                          storage_name(want) + ", got " + storage_name(fed[i]->type()));
    }
    // 2. ranks, fixed dims and symbols, from the inputs
    std::vector<std::int64_t> s(plan.syms.size(), -1);
    std::vector<std::string> source(plan.syms.size());
    for (int i = 0; i < n; ++i) {
      if (!fed[i]) continue;
      const node_desc* d = plan.order[i];
      const dims_t& got = fed[i]->dims();
      std::string who = "input " + quoted(d->name);
      if (got.rank != d->rank)
        throw shape_error("forward: " + who + " must have rank " + std::to_string(d->rank) + " (" +
                          plan.shape_text(i) + "), got shape " + got.str());
      for (int a = 0; a < d->rank; ++a) {
        const plan_dim& pd = plan.dims[i][a];
        if (pd.n_syms == 0) {
          if (got.d[a] != pd.constant)
            throw shape_error("forward: " + who + " axis " + std::to_string(a) + " must be " +
                              std::to_string(pd.constant) + ", got " + std::to_string(got.d[a]) + " (shape " +
                              got.str() + ")");
          continue;
        }
        auto k = static_cast<std::size_t>(pd.sym[0]);
        std::string here = who + " axis " + std::to_string(a);
        if (s[k] < 0) {
          s[k] = got.d[a];
          source[k] = here;
        } else if (s[k] != got.d[a]) {
          throw shape_error("forward: dim " + quoted(plan.syms[k]) + " is " + std::to_string(s[k]) + " from " +
                            source[k] + " but " + std::to_string(got.d[a]) + " from " + here);
        }
      }
    }
    for (std::size_t k = 0; k < s.size(); ++k)
      if (s[k] < 0) throw shape_error("forward: dim " + quoted(plan.syms[k]) + " is not bound by any input");
    // 3. dims of every node, parameters present and of the right shape
    std::vector<dims_t> nd(n);
    std::vector<std::array<std::int64_t, 2>> na(n);
    for (int i = 0; i < n; ++i) {
      const node_desc* d = plan.order[i];
      nd[i].rank = d->rank;
      for (int a = 0; a < d->rank; ++a) nd[i].d[a] = eval(plan.dims[i][a], s);
      na[i] = {eval(plan.dims[i][max_rank], s), eval(plan.dims[i][max_rank + 1], s)};
    }
    std::string absent;
    for (int i = 0; i < n; ++i) {
      const node_desc* d = plan.order[i];
      if (d->kind != op_kind::param) continue;
      if (!params->contains(d->name)) {
        absent += (absent.empty() ? "" : ", ") + quoted(d->name) + " " + nd[i].str();
        continue;
      }
      const tensor<T>& v = params->value(d->name);
      if (!(v.dims() == nd[i]))
        throw shape_error("forward: parameter " + quoted(d->name) + " must have shape " + nd[i].str() +
                          ", the store holds " + v.dims().str());
    }
    if (!absent.empty()) throw missing_error("forward: parameter(s) missing from the store: " + absent);
    // 4. run-time checks of the ops (shapes only; no data yet)
    std::vector<dims_t> edims(static_cast<std::size_t>(plan.edges()));
    for (std::size_t e = 0; e < edims.size(); ++e) edims[e] = nd[plan.in_idx[e]];
    const std::vector<const void*> no_data(edims.size(), nullptr);
    for (int i = 0; i < n; ++i) {
      if (leaf[i]) continue;
      const auto& k = ops::kernel<T>(plan.order[i]->kind);
      if (!k.check) continue;
      const auto first = static_cast<std::size_t>(plan.in_off[i]), count = plan.inputs(i).size();
      ops::op_args<T> a;
      a.node = plan.order[i];
      a.in = std::span(no_data).subspan(first, count);
      a.in_dims = std::span(edims).subspan(first, count);
      a.out_dims = nd[i];
      a.dattr = na[i];
      k.check(a);
    }
    // 5. strided feeds: read in place by ops that can, copied for the others
    std::vector<std::int64_t> stride(n, 0);
    std::vector<std::uint8_t> copy(n, 0);
    for (int i = 0; i < n; ++i) {
      if (!fed[i] || fed[i]->mat_stride() == 0) continue;
      const dims_t& d = nd[i];
      if (fed[i]->mat_stride() == d[-2] * d[-1]) continue;  // back to back after all
      stride[i] = fed[i]->mat_stride();
      for (int c : plan.consumers(i)) {
        const auto& k = ops::kernel<T>(plan.order[c]->kind);
        auto ins = plan.inputs(c);
        for (std::size_t pos = 0; pos < ins.size(); ++pos)
          if (ins[pos] == i && !(k.reads_strided && k.reads_strided(plan.order[c], static_cast<int>(pos))))
            copy[i] = 1;
      }
    }
    // 6. commit: nothing above changed any state
    fed_stride = std::move(stride);
    materialize = std::move(copy);
    sym = std::move(s);
    dims = std::move(nd);
    dattr = std::move(na);
    feeds.assign(given.begin(), given.end());
    node_feed = std::move(feed_at);
    allocate();
    val.assign(n, nullptr);
    grad.assign(n, nullptr);
    place_buffers();
    bound = true;
  }

  static std::int64_t aligned(std::int64_t elems) { return (elems + 15) / 16 * 16; }

  void allocate() {
    bool grow = cap_val.empty();
    std::vector<std::int64_t> want_val(n, 0), want_grad(n, 0);
    for (int i = 0; i < n; ++i) {
      bool input = plan.order[i]->kind == op_kind::input;
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

  ops::op_args<T> args(int i) const {
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
    a.din_fresh = std::span(edge_fresh).subspan(first, count);
    a.dout = grad[i];
    a.training = opts.training;
    return a;
  }

  // Copies strided feeds that some consumer cannot read in place into their arena buffer.
  void copy_strided_feeds() {
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

  void forward() {
    copy_strided_feeds();
    auto compute = [this](int i) { ops::kernel<T>(plan.order[i]->kind).forward(args(i)); };
    run_dag(*arena, fwd, compute);
    forwarded = true;
    backwarded = false;
  }

  void backward(std::span<const tensor<T>> cot) {
    if (opts.inference) throw error("backward: this executor was made for inference (exec_options::inference)");
    if (!forwarded) throw error("backward: call forward() first");
    auto roots = plan.roots;
    if (cot.size() != roots.size())
      throw shape_error("backward: " + std::to_string(cot.size()) + " cotangents given for " +
                        std::to_string(roots.size()) + " outputs");
    for (std::size_t r = 0; r < roots.size(); ++r)
      if (!(cot[r].dims() == dims[roots[r]]))
        throw shape_error("backward: cotangent " + std::to_string(r) + " has shape " + cot[r].dims().str() +
                          ", output " + std::to_string(r) + " has shape " + dims[roots[r]].str());
    // the outputs' gradients start as the cotangents; every other gradient (parameters'
    // included) is zeroed by its first contributor's task (see zero_before)
    for (std::size_t r = 0; r < roots.size(); ++r)
      if (T* g = grad[roots[r]]) std::memset(g, 0, static_cast<std::size_t>(dims[roots[r]].size()) * sizeof(T));
    for (std::size_t r = 0; r < roots.size(); ++r) {
      T* g = grad[roots[r]];
      if (!g) continue;  // no gradient flows through this output
      for (std::int64_t e = 0; e < cot[r].size(); ++e) g[e] += cot[r][e];
    }
    auto compute = [this](int i) {
      for (int x : zero_before[i]) std::memset(grad[x], 0, static_cast<std::size_t>(dims[x].size()) * sizeof(T));
      ops::kernel<T>(plan.order[i]->kind).backward(args(i));
    };
    run_dag(*arena, bwd, compute);
    backwarded = true;
  }
};

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
  return {static_cast<const T*>(p_->val[i]), p_->dims[i]};
}

template <class T>
tensor_view<const T> executor<T>::grad_at(int i) const {
  if (!p_->backwarded) throw error("executor: no gradient before backward()");
  if (!p_->grad[i])
    throw error("executor: no gradient flows to " + p_->plan.describe(i) +
                (p_->plan.order[i]->kind == op_kind::input ? " (set exec_options::input_grads)" : ""));
  return {p_->grad[i], p_->dims[i]};
}

template <class T>
tensor_view<const T> executor<T>::output(int k) const {
  if (k < 0 || k >= static_cast<int>(p_->plan.roots.size()))
    throw error("executor: output " + std::to_string(k) + " does not exist (the graph has " +
                std::to_string(p_->plan.roots.size()) + ")");
  return value_at(p_->plan.roots[k]);
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
