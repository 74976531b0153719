#include "loom/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <limits>

#include "loom/core/errors.hpp"

namespace loom {
namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

template <class T>
trainer<T>::trainer(executor<T>& run, param_store<T>& params, optimizer<T>& opt, trainer_options options)
    : run_(&run), params_(&params), opt_(&opt), accumulator_(params), options_(std::move(options)),
      progress_(options_.total_steps, options_.progress), start_(now_seconds()) {
  if (!options_.csv_path.empty())
    csv_ = std::make_unique<csv_log>(options_.csv_path,
                                     std::vector<std::string>{"step", "loss", "lr", "grad_norm", "tokens_per_s",
                                                              "valid_loss"});
}

template <class T>
double trainer<T>::seconds() const {
  return now_seconds() - start_;
}

template <class T>
double trainer<T>::step(std::span<const feed> feeds, std::int64_t tokens) {
  const std::vector<feed> one(feeds.begin(), feeds.end());
  return step(std::span<const std::vector<feed>>(&one, 1), tokens);
}

template <class T>
double trainer<T>::step(std::span<const std::vector<feed>> micro_batches, std::int64_t tokens) {
  if (micro_batches.empty()) throw value_error("trainer: a step needs at least one micro-batch");
  const auto count = static_cast<std::int64_t>(micro_batches.size());
  std::vector<double> losses;
  accumulator_.clear();
  for (const auto& feeds : micro_batches) {
    run_->forward(feeds);
    losses.push_back(static_cast<double>(run_->output()[0]));
    // with other processes, every one must take the same decision: see below
    if (!sync_ && !std::isfinite(losses.back()))
      throw value_error("trainer: the loss is " + std::to_string(losses.back()) + " at step " +
                        std::to_string(steps() + 1) +
                        (count > 1 ? " (micro-batch " + std::to_string(losses.size()) + ")" : std::string()) +
                        "; the parameters were not updated");
    const bool last = static_cast<std::int64_t>(losses.size()) == count;
    if (last && sync_) sync_->start(accumulator_, {tree_sum(losses), tokens, count});
    run_->backward();
    if (!last) accumulator_.push();
  }
  double loss = 0;
  if (sync_) {
    const step_totals all = sync_->finish();
    loss = all.loss_sum / static_cast<double>(all.micro_batches);
    tokens = all.tokens;
    if (!std::isfinite(loss))
      throw value_error("trainer: the mean loss over all processes is " + std::to_string(loss) + " at step " +
                        std::to_string(steps() + 1) + "; the parameters were not updated");
  } else {
    accumulator_.finish_all(count);
    loss = tree_sum(losses) / static_cast<double>(count);
  }
  grad_norm_ = options_.clip_norm > 0 ? clip_grad_norm(*params_, options_.clip_norm) : 0.0;
  opt_->step();
  tokens_ += tokens;
  const long s = static_cast<long>(steps());
  progress_.update(s, loss, tokens);
  curve_sum_ += loss;
  if (++curve_count_ >= options_.curve_every || s == options_.total_steps) {
    train_curve_.emplace_back(static_cast<double>(s), curve_sum_ / static_cast<double>(curve_count_));
    curve_sum_ = 0;
    curve_count_ = 0;
  }
  if (csv_)
    csv_->row({static_cast<double>(s), loss, opt_->lr(), grad_norm_, static_cast<double>(tokens_) / seconds(),
               std::numeric_limits<double>::quiet_NaN()});
  return loss;
}

template <class T>
void trainer<T>::validation(double loss) {
  const double s = static_cast<double>(steps());
  valid_curve_.emplace_back(s, loss);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (csv_) csv_->row({s, nan, opt_->lr(), nan, nan, loss});
  char text[64];
  std::snprintf(text, sizeof text, "step %ld  validation loss %.4f", static_cast<long>(s), loss);
  progress_.note(text);
}

template <class T>
void trainer<T>::finish() {
  progress_.finish();
}

template class trainer<float>;
template class trainer<double>;

}  // namespace loom
