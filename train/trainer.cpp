#include "loom/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "loom/core/errors.hpp"

namespace loom {
namespace {
// "NaN", "inf", "-inf" or the number.
std::string number_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return std::to_string(v);
}
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

template <class T>
trainer<T>::trainer(executor<T>& run, param_store<T>& params, optimizer<T>& opt, trainer_options options)
    : run_(&run), params_(&params), opt_(&opt), accumulator_(params), options_(std::move(options)),
      progress_(options_.total_steps, options_.progress), start_(now_seconds()) {
  std::vector<std::string> columns{"step", "loss", "lr", "grad_norm", "tokens_per_s", "valid_loss"};
  if (options_.csv_path.empty()) return;
  if (!options_.resume_log) {
    csv_ = std::make_unique<csv_log>(options_.csv_path, std::move(columns));
    return;
  }
  std::vector<std::vector<double>> rows;
  csv_ = std::make_unique<csv_log>(
      csv_log::resume(options_.csv_path, std::move(columns), static_cast<double>(steps()), &rows));
  for (const auto& r : rows) record(r[0], r[1], r[5]);  // the curves as they were at this step
}

// A row of the log into the loss curves (NaN: no such loss in that row).
template <class T>
void trainer<T>::record(double step, double loss, double valid_loss) {
  if (!std::isnan(valid_loss)) valid_curve_.emplace_back(step, valid_loss);
  if (std::isnan(loss)) return;
  curve_sum_ += loss;
  if (++curve_count_ >= options_.curve_every || step == static_cast<double>(options_.total_steps)) {
    train_curve_.emplace_back(step, curve_sum_ / static_cast<double>(curve_count_));
    curve_sum_ = 0;
    curve_count_ = 0;
  }
}

template <class T>
double trainer<T>::refuse_or_skip(const std::string& what, double loss) {
  if (options_.non_finite == non_finite_action::error)
    throw value_error("trainer: step " + std::to_string(steps() + 1) + ": " + what +
                      "; the parameters were not updated (trainer_options::non_finite = skip skips such steps)");
  last_skipped_ = true;
  ++skipped_;
  return loss;
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
  last_skipped_ = false;
  const auto count = static_cast<std::int64_t>(micro_batches.size());
  std::vector<double> losses;
  accumulator_.clear();
  for (const auto& feeds : micro_batches) {
    run_->forward(feeds);
    losses.push_back(static_cast<double>(run_->output()[0]));
    // Alone, a non-finite loss ends the step here. With other processes every one must take the
    // same decision: it is taken below on the mean loss over all of them.
    if (!sync_ && !std::isfinite(losses.back()))
      return refuse_or_skip("the loss is " + number_text(losses.back()) +
                                (count > 1 ? " (micro-batch " + std::to_string(losses.size()) + ")" : std::string()),
                            losses.back());
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
    if (!std::isfinite(loss)) return refuse_or_skip("the mean loss over all processes is " + number_text(loss), loss);
  } else {
    accumulator_.finish_all(count);
    loss = tree_sum(losses) / static_cast<double>(count);
  }
  // A finite loss can still have infinite gradients: check them all before any update (the
  // summed gradients are the same bits on every process, so every process decides alike).
  const double norm = grad_norm(*params_);
  if (!std::isfinite(norm)) {
    for (const auto& [name, e] : *params_)
      for (std::int64_t i = 0; i < e.grad.size(); ++i)
        if (!std::isfinite(e.grad[i]))
          return refuse_or_skip("the gradient of \"" + name + "\" holds " + number_text(static_cast<double>(e.grad[i])) +
                                    " at element " + std::to_string(i) + " of " + e.grad.dims().str(),
                                loss);
    return refuse_or_skip("the gradients' norm overflows", loss);
  }
  grad_norm_ = norm;
  if (options_.clip_norm > 0) clip_grad_norm(*params_, options_.clip_norm);
  opt_->step();
  if (sync_) sync_->after_update();
  tokens_ += tokens;
  const long s = static_cast<long>(steps());
  progress_.update(s, loss, tokens);
  record(static_cast<double>(s), loss, std::numeric_limits<double>::quiet_NaN());
  if (csv_)
    csv_->row({static_cast<double>(s), loss, opt_->lr(), grad_norm_, static_cast<double>(tokens_) / seconds(),
               std::numeric_limits<double>::quiet_NaN()});
  return loss;
}

template <class T>
void trainer<T>::validation(double loss) {
  const double s = static_cast<double>(steps());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  record(s, nan, loss);
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
