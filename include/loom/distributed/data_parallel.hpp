// data_parallel<T>: one model trained by several processes, each on its own micro-batches of
// every step, holding the same parameters bit for bit after every step.
//
//   auto run = g.executor<float>(params, {.threads = 1});
//   distributed::data_parallel<float> dp(world, run, params, {.config = {{"data seed", "7"}}});
//   trainer<float> tr(run, params, opt);
//   tr.set_gradient_sync(&dp);
//   tr.step(my_micro_batches, tokens);   // the mean gradient over every rank's micro-batches
//
// Gradients are packed into buckets (bucket_bytes) in the order backward finishes them — first
// as the plan suggests, then, from the second step on, as rank 0's first backward really did —;
// a bucket is summed over the ranks — in the fixed tree order of distributed/tree.hpp, never in
// MPI's — as soon as backward has finished all its gradients, by a communication thread, while
// backward goes on. docs/distributed.md explains the order and what it costs.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/distributed/communicator.hpp"
#include "loom/graph/executor.hpp"
#include "loom/train/gradient_sync.hpp"
#include "loom/train/optim.hpp"

namespace loom::distributed {

struct data_parallel_options {
  std::size_t bucket_bytes = std::size_t{4} << 20;  // gradients per bucket (a larger parameter has its own)
  bool overlap = true;                              // reduce buckets during backward (false: after it)
  /// Settings that must be the same on every rank besides the model (data seed, batch size,
  /// micro-batches, ...): checked at construction like the model itself.
  std::map<std::string, std::string> config{};
};

/// Where the time of the last step's reduction went, in seconds.
struct reduction_times {
  double exposed = 0;  // from the end of backward (finish()) until the gradients were ready
  double active = 0;   // from the first bucket ready to the last reduced: communication time
  double cpu = 0;      // CPU time of the communication thread during the step
};

/// Sums gradients over the ranks of a communicator (gradient_sync for loom::trainer).
template <class T>
class data_parallel final : public gradient_sync<T> {
 public:
  /// Collective. Checks that every rank has the same model (graph structure, parameter names
  /// and shapes), bucket size and options.config — else throws mismatch_error naming the ranks
  /// and what differs —, copies rank 0's parameters to every rank and checks they are the same,
  /// and installs itself as run's gradient-final callback. `run` and `params` must outlive it.
  data_parallel(const communicator& comm, executor<T>& run, param_store<T>& params, data_parallel_options options = {});
  ~data_parallel() override;
  data_parallel(const data_parallel&) = delete;
  data_parallel& operator=(const data_parallel&) = delete;

  void start(gradient_accumulator<T>& local, step_totals mine) override;
  /// Throws rank_lost_error if a rank does not answer within the communicator's timeout.
  step_totals finish() override;

  /// Gathers the parameters a sharded optimizer updated (see shard_optimizer); the trainer
  /// calls it after each update. Throws rank_lost_error as finish().
  void after_update() override;

  /// Shards `opt`'s state over the ranks (ZeRO stage 1): rank r keeps the buffers of, and
  /// updates, a consecutive share of the parameters in name order (shard_bounds(): balanced by
  /// elements), and after each update the values are gathered from their owners (one
  /// all-gather over the packed store), so every rank holds every parameter with the bits of
  /// the unsharded update, which is element-wise. Each rank then holds about 1/N of the
  /// optimizer's buffers. Collective; call it before training, after any load_checkpoint.
  /// distributed::save_checkpoint gathers the whole state to rank 0, and
  /// distributed::load_checkpoint loads any checkpoint into it, so checkpoints stay whole and
  /// resume at any world size, sharded or not. `opt` must update this object's store and
  /// outlive it. Throws value_error for an optimizer of another store, or a store that is not
  /// packed (param_store::pack; make_params makes it packed).
  void shard_optimizer(optimizer<T>& opt);
  /// Where rank r's share starts, for r = 0..size(), in the store's name order (the last entry
  /// is the number of parameters): the share of rank r is [bounds[r], bounds[r + 1]).
  std::vector<std::size_t> shard_bounds() const;

  /// Whether later steps reduce buckets during backward (true) or after it: a benchmark compares
  /// the two within one job. The same bits either way.
  void set_overlap(bool overlap);
  const communicator& comm() const;
  /// Number of buckets, and of parameters in each, in the order they are reduced.
  std::size_t buckets() const;
  std::size_t bucket_parameters(std::size_t bucket) const;
  const reduction_times& last_times() const;

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

extern template class data_parallel<float>;
extern template class data_parallel<double>;

}  // namespace loom::distributed
