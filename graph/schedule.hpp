// Scheduling: the forward and backward passes as DAGs of node tasks, and how they run on TBB.
// Private to the executor.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include "loom/graph/plan.hpp"

namespace loom::detail {

/// A DAG of tasks run with atomic dependency counts on a task_group; a finished task runs
/// one ready successor itself and spawns the others.
struct dag {
  std::vector<std::vector<int>> succ;
  std::vector<int> pending0;
  std::vector<int> start;
  std::unique_ptr<std::atomic<int>[]> pending;  // the counters of a run, allocated once

  void finish() { pending.reset(new std::atomic<int>[pending0.size()]); }
};

/// The two passes of a plan and who prepares each gradient buffer.
struct schedules {
  dag forward, backward;
  /// Per node: the gradients its backward task zeroes just before it runs.
  std::vector<std::vector<int>> zero_before;
  /// Per input edge (plan.in_off numbering): 1 when that edge's contribution is the first to
  /// its gradient and the consumer's kernel stores it (op_entry::writes_fresh).
  std::vector<std::uint8_t> edge_fresh;
  /// Per node: the leaves (parameters, inputs) whose gradient is final once its backward task
  /// has run — each leaf at its last contributor, the consumer with the smallest index.
  std::vector<std::vector<int>> leaf_grads_final;
};

/// Forward: a computed node waits for its computed inputs. Backward: a node runs after every
/// consumer has added its gradient, and the consumers of one node add theirs in a fixed order
/// (descending node index), so sums are the same for any thread count. leaf[i]: input or
/// parameter; needs_grad[i]: a gradient buffer exists for node i.
schedules build_schedules(const plan_view& plan, std::span<const std::uint8_t> leaf,
                          std::span<const std::uint8_t> needs_grad);

/// Runs fn(node) for every node of g in an order that respects its edges, on `arena`.
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

}  // namespace loom::detail
