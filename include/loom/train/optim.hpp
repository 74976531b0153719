// Optimizers over a param_store (SGD, Adam, AdamW with PyTorch 1.13's semantics), gradient
// clipping and learning-rate schedules.
//
// An optimizer reads each parameter's gradient from the store (params.grad(name)) and updates
// its value in place. Its state — the step count and per-parameter buffers such as Adam's
// exp_avg — is exposed so that checkpoints can save and restore it exactly.
//
// The optimizers work on the store's layout as they find it (make_params packs it once; they
// never move a parameter) and keep their buffers in blocks of the same segments, so a step over
// a packed store is one pass over a few long arrays, split over the calling thread's TBB arena
// (all cores unless a tbb::global_control or task_arena limits it). Every element is computed
// on its own, so the results are the same for any number of threads and any layout.
//
//   adamw<float> opt(params, {.lr = 3e-4, .weight_decay = 0.1});
//   opt.set_schedule(warmup_cosine(3e-4, 100, 10000));
//   for (...) { opt.zero_grad(); run.forward(...); run.backward(); clip_grad_norm(params, 1.0); opt.step(); }
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/core/errors.hpp"
#include "loom/core/flat_block.hpp"
#include "loom/core/params.hpp"
#include "loom/core/tensor.hpp"

namespace loom {

/// What an optimizer carries from step to step: the number of steps taken and its buffers by
/// kind ("momentum_buffer", "exp_avg", "exp_avg_sq") and parameter name, each of the
/// parameter's shape. Before the first step there are no buffers.
template <class T>
struct optimizer_state {
  std::int64_t step = 0;
  std::map<std::string, std::map<std::string, tensor<T>>> buffers;  // buffers[kind][param name]
};

/// The common interface of the optimizers. Not copyable: it refers to its store.
template <class T>
class optimizer {
 public:
  virtual ~optimizer() = default;
  optimizer(const optimizer&) = delete;
  optimizer& operator=(const optimizer&) = delete;

  /// One update of every parameter from its gradient; first sets lr from the schedule, if any,
  /// at step steps() + 1. Throws shape_error (changing nothing) if a gradient's shape is not
  /// its parameter's, value_error if the step count is at its maximum (2^63 − 1).
  void step();
  /// Sets every gradient in the store to zero (PyTorch's zero_grad(set_to_none=False)).
  void zero_grad() { params_.zero_grad(); }

  double lr() const { return lr_; }
  /// Sets the learning rate used by the following steps.
  void set_lr(double lr);
  /// From now on, step() sets lr = schedule(n) before its n-th step (n counts from 1).
  void set_schedule(std::function<double(std::int64_t)> schedule) { schedule_ = std::move(schedule); }
  /// The number of steps taken.
  std::int64_t steps() const { return state_.step; }
  param_store<T>& params() const { return params_; }

  /// "sgd", "adam" or "adamw": checkpoints record it and refuse to load another's state.
  virtual std::string_view name() const = 0;
  /// The kinds of buffer this optimizer keeps per parameter once it has stepped.
  virtual std::vector<std::string> buffer_kinds() const = 0;
  /// The hyperparameters as strings (lr, betas, ...), for the record in checkpoints.
  virtual std::map<std::string, std::string> hyperparameters() const = 0;

  const optimizer_state<T>& state() const { return state_; }
  /// Why a state cannot be loaded into this optimizer, one line per problem (empty if it can):
  /// unknown buffer kinds or parameters, wrong shapes, missing buffers after step 0, a buffer
  /// of a parameter outside the shard. With `whole`, checks it as the state of every
  /// parameter, whatever the shard (a sharded optimizer's state gathered from all ranks).
  std::vector<std::string> state_differences(const optimizer_state<T>& state, bool whole = false) const;

  /// Optimizer-state sharding (ZeRO stage 1; distributed::data_parallel::shard_optimizer sets
  /// it on each rank): from now on this optimizer keeps buffers for, and updates, only the
  /// parameters [first, end) of the store in name order; step() leaves the others as they
  /// are (another process updates them, and their values are copied in afterwards), and their
  /// buffers are dropped now. shard(0, params().size()) is the whole store again: the others'
  /// buffers are then absent until loaded (load_state) or, before the first step, made. Every
  /// element is updated on its own, so the shard's values are the same bits as unsharded. Throws value_error for a range outside the
  /// store.
  void shard(std::size_t first, std::size_t end);
  /// The shard: [first, end) in the store's name order; [0, params().size()) when unsharded.
  std::pair<std::size_t, std::size_t> shard() const;
  /// Whether a shard smaller than the store is set.
  bool sharded() const;
  /// Replaces the state. Throws value_error listing every difference, changing nothing.
  void load_state(optimizer_state<T> state);

 protected:
  /// Why the values of a buffer of `kind` cannot be this optimizer's (empty if they can). Adam
  /// refuses a negative second moment, whose square root the next step would take; values that
  /// are not finite are left to the loaders (load_options::allow_non_finite).
  virtual std::string value_problem(const std::string& kind, const tensor<T>& buffer) const;
  optimizer(param_store<T>& params, double lr);
  /// Makes every buffer this step needs (packed(), for each of buffer_kinds()), before the
  /// step count moves: an update() cannot fail after it.
  virtual void prepare() = 0;
  /// Updates every parameter; state_.step has already been incremented.
  virtual void update() = 0;
  /// The buffers of `kind`, one per parameter of the shard in name order (created as zeros where
  /// absent): the base of their block, laid out as flat_block::lay_out does. If `created`
  /// is given, it receives, per parameter in name order, whether its buffer was created now.
  T* packed(const std::string& kind, std::vector<char>* created = nullptr);
  /// n consecutive elements of one parameter: its value and gradient from `value` and `grad`
  /// on, its buffers from element `buffer` on of each block packed() returns.
  struct piece {
    T* value;
    const T* grad;
    std::int64_t buffer, n;
    std::size_t param;  // the parameter's index in name order
  };
  /// Runs fn(piece) over the elements of every parameter of the shard (never the gaps between
  /// them), in parallel on the calling thread's TBB arena. Each element is visited once, so
  /// results do not depend on the number of threads.
  template <class Fn>
  void for_elements(const Fn& fn) const;
  optimizer_state<T> state_;
  double lr_;

 private:
  param_store<T>& params_;
  std::function<double(std::int64_t)> schedule_;
  std::map<std::string, flat_block<T>> blocks_;  // where packed() put the buffers of each kind
  std::vector<piece> pieces_;  // for_elements' work, made by step() before prepare()
  std::size_t first_ = 0, end_ = SIZE_MAX;  // the shard (SIZE_MAX: to the end of the store)
  bool owns(std::size_t k) const { return k >= first_ && k < std::min(end_, params_.size()); }
  std::set<std::string_view, std::less<>> owned_names() const;  // the shard's parameters, by name
};

/// Options of sgd; PyTorch's defaults.
struct sgd_options {
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

/// Stochastic gradient descent as torch.optim.SGD: g = grad + wd·p; with momentum,
/// buf = g at the first step, then buf = momentum·buf + (1 − dampening)·g, and g = buf (or
/// g + momentum·buf with nesterov); p −= lr·g. Throws value_error for negative settings or
/// nesterov without momentum / with dampening.
template <class T>
class sgd final : public optimizer<T> {
 public:
  sgd(param_store<T>& params, double lr, sgd_options options = {});
  std::string_view name() const override { return "sgd"; }
  std::vector<std::string> buffer_kinds() const override;
  std::map<std::string, std::string> hyperparameters() const override;
  const sgd_options& options() const { return options_; }

 private:
  void prepare() override;
  void update() override;
  std::vector<char> fresh_;  // per parameter: its momentum buffer was made this step
  T* buf_ = nullptr;         // the momentum buffers (prepare())
  sgd_options options_;
};

/// Options of adam (and adamw, whose weight_decay defaults to 1e-2); PyTorch's defaults.
struct adam_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};
struct adamw_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

/// Adam as torch.optim.Adam (amsgrad off): g = grad + wd·p; m = β1·m + (1−β1)·g;
/// v = β2·v + (1−β2)·g²; p −= lr/(1−β1^t) · m / (√v / √(1−β2^t) + eps).
/// Throws value_error for lr, eps or weight_decay < 0 or a beta outside [0, 1).
template <class T>
class adam : public optimizer<T> {
 public:
  adam(param_store<T>& params, adam_options options = {});
  std::string_view name() const override { return decoupled_ ? "adamw" : "adam"; }
  std::vector<std::string> buffer_kinds() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::map<std::string, std::string> hyperparameters() const override;
  const adam_options& options() const { return options_; }

 protected:
  adam(param_store<T>& params, adam_options options, bool decoupled);
  std::string value_problem(const std::string& kind, const tensor<T>& buffer) const override;

 private:
  void prepare() override;
  void update() override;
  T* m_ = nullptr;  // the exp_avg and exp_avg_sq buffers (prepare())
  T* v_ = nullptr;
  adam_options options_;
  bool decoupled_ = false;
};

/// AdamW as torch.optim.AdamW: first the decoupled decay p −= lr·wd·p, then Adam's update
/// without weight decay in the gradient.
template <class T>
class adamw final : public adam<T> {
 public:
  adamw(param_store<T>& params, adamw_options options = {});
};

/// The total L2 norm of all gradients, as clip_grad_norm computes it, without changing them.
/// Not finite when a gradient holds NaN or infinity.
template <class T>
double grad_norm(const param_store<T>& params);

/// Scales all gradients together so that their total L2 norm is at most max_norm, as
/// torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied if coef < 1.
/// Returns the total norm before clipping. Throws value_error if max_norm < 0.
template <class T>
double clip_grad_norm(param_store<T>& params, double max_norm);

/// The Transformer paper's schedule: lr(step) = factor · d_model^−0.5 · min(step^−0.5,
/// step · warmup^−1.5), with step counted from 1 (step 0 is taken as 1). Throws value_error
/// for d_model or warmup < 1.
struct noam_schedule {
  noam_schedule(double d_model, double warmup, double factor = 1);
  double operator()(std::int64_t step) const;
  double d_model, warmup, factor;
};

/// Linear warmup from 0 to peak_lr over `warmup` steps (lr = peak · step / warmup), then a
/// cosine decay lr = min + (peak − min)·½(1 + cos(π·(step − warmup)/(total − warmup))),
/// reaching min_lr at step `total` and staying there. Throws value_error unless
/// 0 ≤ warmup < total and min_lr ≤ peak_lr.
struct warmup_cosine {
  warmup_cosine(double peak_lr, std::int64_t warmup, std::int64_t total, double min_lr = 0);
  double operator()(std::int64_t step) const;
  double peak_lr;
  std::int64_t warmup, total;
  double min_lr;
};

}  // namespace loom
