// trainer: one training step (forward, backward, clipping, optimizer step) with a live
// progress line, a CSV log and the loss curve kept for plotting.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "loom/graph/executor.hpp"
#include "loom/train/accumulate.hpp"
#include "loom/train/gradient_sync.hpp"
#include "loom/train/optim.hpp"
#include "loom/train/progress.hpp"

namespace loom {

/// What trainer::step does when the loss or a gradient holds NaN or infinity.
enum class non_finite_action {
  error,  // throw value_error naming the loss or the first parameter whose gradient is not finite
  skip,   // skip the step: no update, the optimizer's step count stays (AMP's GradScaler does so)
};

struct trainer_options {
  long total_steps = 1000;       // for the progress line's ETA
  double clip_norm = 1.0;        // clip gradients to this global L2 norm (0: no clipping)
  std::string csv_path;          // CSV log of step, loss, lr, grad_norm, tokens_per_s, valid_loss ("": none)
  progress_options progress{};   // where and how the progress line shows
  long curve_every = 10;         // keep a point of the loss curve every this many steps (mean loss)
  non_finite_action non_finite = non_finite_action::error;
  bool resume_log = false;       // continue csv_path's log up to the optimizer's step (see csv_log::resume)
};

/// Drives training of one graph whose output 0 is a scalar loss. Not thread-safe.
template <class T>
class trainer {
 public:
  /// run: an executor of the training graph; params: its store; opt: an optimizer over it.
  /// All three must outlive the trainer. With options.resume_log, the CSV log keeps its rows
  /// up to opt.steps() and the loss curves are restored from them.
  trainer(executor<T>& run, param_store<T>& params, optimizer<T>& opt, trainer_options options = {});

  /// One step on `feeds`: forward, backward, clip_grad_norm, optimizer step. `tokens` counts
  /// the step's tokens (for tok/s). Returns the loss. Throws what forward() throws (nothing
  /// is updated then). When the loss or a gradient is NaN or infinite, nothing is updated and,
  /// as options.non_finite says, throws value_error naming the loss or the first parameter
  /// (in name order) whose gradient is not finite, or skips the step (last_step_skipped()).
  double step(std::span<const feed> feeds, std::int64_t tokens = 0);
  double step(std::initializer_list<feed> feeds, std::int64_t tokens = 0) {
    return step(std::span<const feed>(feeds.begin(), feeds.size()), tokens);
  }
  /// One step over the micro-batches of one batch: forward and backward of each in order, their
  /// gradients summed in the tree order of accumulate.hpp and divided by their number (with a
  /// gradient_sync, by the number over all processes), then clipping and the optimizer step.
  /// `tokens` counts this process's tokens. Returns the mean loss of the micro-batches (of all
  /// processes'). Throws value_error for no micro-batches and what forward() throws; a loss or
  /// gradient that is not finite is handled as in step(feeds) (with a gradient_sync, on the mean
  /// loss and the summed gradients, so every process decides alike).
  double step(std::span<const std::vector<feed>> micro_batches, std::int64_t tokens = 0);
  /// From now on, steps combine their gradients with other processes through `sync` (nullptr:
  /// this process alone), which must outlive its use.
  void set_gradient_sync(gradient_sync<T>* sync) { sync_ = sync; }
  /// Records a validation loss at the current step (CSV and curve) and shows it.
  void validation(double loss);
  /// Ends the progress line.
  void finish();

  /// Steps taken by this trainer's optimizer.
  std::int64_t steps() const { return opt_->steps(); }
  /// The gradients' global L2 norm at the last step, before clipping.
  double last_grad_norm() const { return grad_norm_; }
  /// Whether the last step() was skipped for a non-finite loss or gradient, and how many were.
  bool last_step_skipped() const { return last_skipped_; }
  std::int64_t skipped_steps() const { return skipped_; }
  /// (step, mean training loss) points and (step, validation loss) points.
  const std::vector<std::pair<double, double>>& train_curve() const { return train_curve_; }
  const std::vector<std::pair<double, double>>& valid_curve() const { return valid_curve_; }
  /// Seconds since construction.
  double seconds() const;

 private:
  executor<T>* run_;
  param_store<T>* params_;
  optimizer<T>* opt_;
  gradient_sync<T>* sync_ = nullptr;
  gradient_accumulator<T> accumulator_;
  trainer_options options_;
  progress_line progress_;
  std::unique_ptr<csv_log> csv_;
  double grad_norm_ = 0, curve_sum_ = 0, start_ = 0;
  std::int64_t tokens_ = 0, skipped_ = 0;
  bool last_skipped_ = false;
  long curve_count_ = 0;
  double refuse_or_skip(const std::string& what, double loss);
  void record(double step, double loss, double valid_loss);
  std::vector<std::pair<double, double>> train_curve_, valid_curve_;
};

extern template class trainer<float>;
extern template class trainer<double>;

}  // namespace loom
