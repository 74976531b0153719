// The state of an executor and the jobs that share it, one file each:
//   executor.cpp       construction, the forward and backward passes, the public class
//   readout.cpp        outputs by position and name, values and gradients after a pass
//   bind.cpp           binding feeds: checks in numbered steps, then a commit that cannot fail
//   buffers.cpp        placing value and gradient buffers in the arena, and the kernels' arguments
//   schedule.cpp       the forward and backward DAGs (schedule.hpp)
//   planner.cpp        the memory plan: values, in place, gradients (planner.hpp)
//   recompute.cpp      checkpointed blocks recomputed in backward
//   placement.cpp      lifetimes, conflicts and offsets in the arena (planner_context.hpp)
//   memory_report.cpp  memory_plan(dims) before running
//   init_params.cpp    make_params: initial values in plan order
//   rewrite.cpp        fusion rules applied to the plan (rewrite.hpp)
//   profile.cpp        exec_options::profile: the per-node times' report (executor.cpp takes them)
// and arena_allocator.hpp, the arena's memory. Private to the library.
#pragma once

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "loom/core/kernel.hpp"
#include "arena_allocator.hpp"
#include "loom/graph/executor.hpp"
#include "../core/int8_matrix.hpp"
#include "planner.hpp"
#include "rewrite.hpp"
#include "schedule.hpp"
#include "../core/text.hpp"

namespace loom {


// Which input's or parameter's axis bound a symbol (named only in an error; bind.cpp).
struct bind_source {
  int node = -1, axis = -1;
  bool feed = false;
};

// The working vectors of a full bind (bind.cpp), per node unless said otherwise. A decoding
// step binds anew at every token (the cache's length changes), and allocating these afresh
// each time was a visible part of the step.
struct bind_scratch {
  std::vector<const feed*> fed;
  std::vector<const dims_t*> param_dims;
  std::vector<std::int64_t> sym;         // per symbol
  std::vector<bind_source> source;       // per symbol
  std::vector<dims_t> dims;
  std::vector<std::array<std::int64_t, 2>> dattr;
  std::vector<dims_t> edge_dims;         // per edge, for the ops' checks
  std::vector<const void*> no_data;      // per edge
  std::vector<std::int64_t> stride;
  std::vector<std::uint8_t> copy, grows;
  std::vector<int> feed_at;
  std::vector<std::int64_t> sizes;       // per planned buffer (allocate)
  std::vector<dims_t> in;                // one node's input dims (allocate)
};

template <class T>
struct executor<T>::impl {
  // ---- fixed at construction ----
  plan_view original;                     // the graph as written
  param_store<T>* params;
  exec_options opts;
  // per node, a parameter's entry in the store (null for other nodes and absent names), looked
  // up by name once and again only after a layout change of the store (a name added, the store
  // assigned: see param_store): the name lookups of every call were about 2% of a decoding step
  mutable std::vector<typename param_store<T>::entry*> param_entry;
  mutable std::uint64_t param_version = 0;  // the store's version they were found at (0: never)
  const std::vector<typename param_store<T>::entry*>& param_entries() const {
    if (param_version != params->layout_version()) {
      param_entry.assign(static_cast<std::size_t>(n), nullptr);
      for (int k = 0; k < n; ++k)
        if (plan.order[k]->op->role == node_role::param) param_entry[static_cast<std::size_t>(k)] = params->find(plan.order[k]->name);
      param_version = params->layout_version();
    }
    return param_entry;
  }
  typename param_store<T>::entry* param_at(int i) const { return param_entries()[static_cast<std::size_t>(i)]; }
  std::unique_ptr<tbb::task_arena> arena;
  std::unordered_map<const node_desc*, int> index;  // original nodes by descriptor
  std::vector<std::uint8_t> keep_original;          // keep(): per original node

  // ---- the plan it runs: the original rewritten with fusions (adopt_plan, again after keep())
  std::unique_ptr<detail::rewritten_plan> rewritten;
  plan_view plan;
  int n = 0;
  std::vector<std::uint8_t> leaf, needs_grad;
  std::vector<op_kernels<T>> kernels;     // per node (ops/registry.hpp: test overrides applied)
  detail::schedules sched;
  std::vector<int> view_of;               // views (op_entry::is_view): the node whose buffer they share
  std::vector<std::uint8_t> grad_view;    // 1 when a view also shares its input's gradient
  std::vector<std::uint8_t> keep;         // nodes whose value and gradient stay readable (keep_original mapped)
  detail::buffer_plan buffers;            // which buffers share bytes (planner.hpp)
  std::vector<int> may_append;            // per node: the input whose storage it may grow in place, or −1
  std::function<void(int)> gradient_final;  // executor::on_gradient_final

  // ---- the last successful bind (bind.cpp) ----
  bool bound = false, forwarded = false, backwarded = false;
  // the store's layout_version() at that bind: the parameters' addresses in val and grad hold
  // while it is unchanged (param_store changes it whenever a parameter's memory may move)
  std::uint64_t bound_layout = 0;
  bool values_spent = false;  // a backward ran since the last forward: its values may be overwritten
  std::vector<std::int64_t> sym;
  std::vector<dims_t> dims;
  std::vector<std::array<std::int64_t, 2>> dattr;
  std::vector<const void*> val;
  std::vector<T*> grad;
  std::vector<feed> feeds;
  std::vector<int> node_feed;             // per input node: index of its feed in `feeds`
  std::vector<std::int64_t> val_stride;   // per node: elements between its value's matrices (0: contiguous)
  std::vector<std::uint8_t> materialize;  // per input node: copy the strided feed into the arena
  std::vector<std::uint8_t> appended;     // per node: its value grows its input 0's feed in place
  bind_scratch scratch;                   // bind()'s working vectors, kept for their capacity

  // ---- exec_options::weights = int8 (int8_weights.cpp), quantized at a bind when the store's
  // layout is not the one they were made at (0: not made for this plan, or requantize())
  std::uint64_t int8_layout = 0;
  std::vector<loom::int8_matrix> int8_matrices;  // per node: a parameter's quantized form, or empty
  std::vector<int8_weights> int8_view;        // per node: the same as the kernels read it
  std::vector<const int8_weights*> int8_of;   // per node: the weight its kernel reads, or null
  void quantize_weights();
  // ---- exec_options::pack_weights: per node, what its kernel keeps of its weight (op_args::kept;
  // null for a node that is not a weight product), made anew at a bind when the store's layout
  // is not packed_layout (0: not made for this plan, or requantize())
  std::uint64_t packed_layout = 0;
  std::vector<std::unique_ptr<kept_weight>> kept;
  // per node: a product x · Wᵀ whose W is named in exec_options::float_weights (adopt_plan)
  std::vector<std::uint8_t> float_product;
  // whether node i's op reads input 1 as a weight x · Wᵀ (op_traits::reads_int8_weight) and that
  // input is a parameter: its name then, else empty
  std::string_view weight_of(int i) const;

  // the kernels' view of every input edge (node i's are [in_off[i], in_off[i+1]) of the plan),
  // allocated once and refreshed from val, grad and dims after each bind (buffers.cpp)
  std::vector<const void*> edge_val;
  std::vector<dims_t> edge_dims;
  std::vector<std::int64_t> edge_stride;
  std::vector<T*> edge_grad;

  // ---- the arena: every value and gradient buffer of computed nodes (buffers.cpp) ----
  std::vector<std::int64_t> off_val, off_grad;  // per node, in elements
  std::vector<std::int64_t> off_val_bwd;        // per node recomputed in backward: its second buffer
  std::vector<std::int64_t> off_saved;          // per node with a saved buffer (op_entry::saved_elements)
  std::vector<std::int64_t> off_scratch;        // per node with a backward workspace (op_entry::scratch_elements)
  std::vector<std::int64_t> buffer_offset;      // per planned buffer
  std::vector<std::int64_t> placed_sizes;       // the buffer sizes buffer_offset was placed for
  std::vector<T, arena_allocator<T>> arena_storage;  // the arena (see arena_allocator)
  T* mem_ptr = nullptr;
  std::int64_t mem_elems = 0;                   // allocated
  std::int64_t planned_elems = 0;               // needed by the last bind's placement

  // ---- exec_options::profile (profile.cpp): per node of the plan, its kernels' time; each
  // entry written only by the task that runs its node, read between passes
  struct node_clock {
    double forward = 0, backward = 0, recompute = 0;
    std::int64_t forwards = 0, backwards = 0, recomputes = 0;
  };
  std::vector<node_clock> clocks;  // sized at the first pass after the plan was made
  double forward_wall = 0, backward_wall = 0;
  std::int64_t forward_passes = 0, backward_passes = 0;
  void start_clocks();  // at each pass: clocks sized for the plan
  void clear_profile();  // the profile's sums back to nothing (a new plan, reset_profile())

  // ---- misuse (executor.cpp) ----
  std::atomic<bool> in_use{false};  // a call is running: a second one at once (another thread) is refused
  bool forward_failed = false;      // the last forward() threw inside a kernel: its values are partial
  void check_layout(const char* what) const;  // the store's layout is the last bind's (see below)
  void check_readable() const {       // values may be read: a forward() completed, none is running
    if (in_use.load(std::memory_order_acquire))
      throw error("executor: a value read while a call on the executor is running (from another thread?)");
    if (forward_failed) throw error("executor: no value: the last forward() failed inside a kernel");
    if (!forwarded) throw error("executor: no value before forward()");
  }

  impl(plan_view p, param_store<T>& ps, exec_options o);
  void adopt_plan();
  void make_arena();
  void plan_memory();  // buffers from keep and the options (again after keep())
  void plan_appends();  // may_append, from the plan and the buffers

  void bind(std::span<const feed> given);
  bool same_binding(std::span<const feed> given) const;

  void allocate();
  void place(std::vector<std::int64_t> sizes);  // allocate's placement for these sizes
  void verify_placement(std::span<const std::int64_t> sizes) const;
  const bool check_placement = std::getenv("LOOM_CHECK_MEMORY_PLAN") != nullptr;
  void place_buffers();
  void refresh_edges();
  void copy_strided_feeds();
  ops::op_args<T> args(int i) const;

  void forward();
  void backward(std::span<const tensor<T>> cotangents);
};

/// Marks an executor busy for the length of one call. Executors are not thread-safe: a call
/// made while another is running (from another thread) throws instead of racing.
class busy_guard {
 public:
  busy_guard(std::atomic<bool>& flag, std::string_view call) : flag_(flag) {
    if (flag_.exchange(true, std::memory_order_acquire))
      throw error("executor: " + std::string(call) +
                  " called while another call on the same executor is running (from another thread?): an "
                  "executor is not thread-safe; give each thread its own executor");
  }
  busy_guard(const busy_guard&) = delete;
  busy_guard& operator=(const busy_guard&) = delete;
  ~busy_guard() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool>& flag_;
};

}  // namespace loom
