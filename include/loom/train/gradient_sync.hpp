// gradient_sync<T>: how a trainer hands its gradients to something that combines them across
// processes (loom::distributed::data_parallel), without the core library knowing about MPI.
#pragma once

#include <cstdint>

#include "loom/train/accumulate.hpp"

namespace loom {

/// What one process contributes to a step, and what all of them did together.
struct step_totals {
  double loss_sum = 0;             // tree-order sum of the micro-batches' losses
  std::int64_t tokens = 0;         // tokens processed
  std::int64_t micro_batches = 0;  // micro-batches processed
};

/// Combines a step's gradients across processes. The trainer calls start() after the forward
/// of the step's last micro-batch (the accumulator holding the earlier ones), then backward(),
/// then finish(). Implementations may start sending gradients during that backward.
template <class T>
class gradient_sync {
 public:
  virtual ~gradient_sync() = default;
  /// Before the last micro-batch's backward: `local` holds this process's earlier micro-batches
  /// (it must stay alive until finish()), `mine` this process's totals for the step.
  virtual void start(gradient_accumulator<T>& local, step_totals mine) = 0;
  /// After that backward: returns when every gradient in the store is the mean over every
  /// process's micro-batches, with the totals over all processes (the same on each).
  virtual step_totals finish() = 0;
  /// After the optimizer's update of a step (not after a skipped step): an implementation that
  /// shards the optimizer gathers the updated parameters here. Does nothing by default.
  virtual void after_update() {}
};

}  // namespace loom
