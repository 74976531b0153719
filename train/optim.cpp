// Optimizers, gradient clipping and schedules. The arithmetic follows PyTorch 1.13's
// single-tensor code paths op by op: scalars (bias corrections, step sizes) are computed in
// double and used in T, as PyTorch passes Python floats to its T kernels.
#include "loom/train/optim.hpp"

#include "../ops/vector_isa.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <numbers>
#include <set>

namespace loom {

namespace {

std::string number(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

void require(bool ok, const std::string& what) {
  if (!ok) throw value_error(what);
}

}  // namespace

// ---- optimizer ----

template <class T>
optimizer<T>::optimizer(param_store<T>& params, double lr) : lr_(lr), params_(params) {}

template <class T>
void optimizer<T>::set_lr(double lr) {
  require(lr >= 0, std::string(name()) + ": lr must be >= 0, got " + number(lr));
  lr_ = lr;
}

template <class T>
void optimizer<T>::step() {
  // Check every shape before changing anything.
  for (const auto& [param, e] : params_) {
    if (!(e.grad.dims() == e.value.dims()))
      throw shape_error(std::string(name()) + ": the gradient of \"" + param + "\" has shape " + e.grad.dims().str() +
                        ", its value " + e.value.dims().str());
    for (const auto& [kind, by_param] : state_.buffers) {
      auto it = by_param.find(param);
      if (it != by_param.end() && !(it->second.dims() == e.value.dims()))
        throw shape_error(std::string(name()) + ": the " + kind + " of \"" + param + "\" has shape " +
                          it->second.dims().str() + ", the parameter " + e.value.dims().str());
    }
  }
  if (state_.step == std::numeric_limits<std::int64_t>::max())
    throw value_error(std::string(name()) + ": the step count " + std::to_string(state_.step) +
                      " cannot grow any further");
  if (schedule_) set_lr(schedule_(state_.step + 1));
  ++state_.step;
  update();
}

template <class T>
tensor<T>* optimizer<T>::buffer(const std::string& kind, const std::string& param) {
  auto k = state_.buffers.find(kind);
  if (k == state_.buffers.end()) return nullptr;
  auto p = k->second.find(param);
  return p == k->second.end() ? nullptr : &p->second;
}

template <class T>
tensor<T>& optimizer<T>::buffer_or_zeros(const std::string& kind, const std::string& param, const dims_t& dims) {
  auto& by_param = state_.buffers[kind];
  auto it = by_param.find(param);
  if (it == by_param.end()) it = by_param.emplace(param, tensor<T>(dims)).first;
  return it->second;
}

template <class T>
std::vector<std::string> optimizer<T>::state_differences(const optimizer_state<T>& state) const {
  std::vector<std::string> problems;
  if (state.step < 0) problems.push_back("step count " + std::to_string(state.step) + " is negative");
  if (state.step == std::numeric_limits<std::int64_t>::max())
    problems.push_back("step count " + std::to_string(state.step) + " leaves no room for another step");
  const auto kinds = buffer_kinds();
  const std::set<std::string> known(kinds.begin(), kinds.end());
  for (const auto& [kind, by_param] : state.buffers) {
    if (!known.contains(kind)) {
      problems.push_back(std::string(name()) + " keeps no \"" + kind + "\" buffers");
      continue;
    }
    for (const auto& [param, buf] : by_param) {
      if (!params_.contains(param))
        problems.push_back(kind + " of \"" + param + "\": no such parameter");
      else if (!(buf.dims() == params_.value(param).dims()))
        problems.push_back(kind + " of \"" + param + "\": shape " + buf.dims().str() + ", the parameter's " +
                           params_.value(param).dims().str());
      else if (state.step == 0)
        problems.push_back(kind + " of \"" + param + "\": a buffer at step 0, before any update");
    }
  }
  if (state.step > 0)
    for (const auto& kind : kinds)
      for (const auto& [param, e] : params_) {
        auto k = state.buffers.find(kind);
        if (k == state.buffers.end() || !k->second.contains(param))
          problems.push_back("missing " + kind + " of \"" + param + "\" (shape " + e.value.dims().str() + ") at step " +
                             std::to_string(state.step));
      }
  return problems;
}

template <class T>
void optimizer<T>::load_state(optimizer_state<T> state) {
  const auto problems = state_differences(state);
  if (!problems.empty()) {
    std::string what = std::string(name()) + ": the state does not fit (nothing was loaded):";
    for (const auto& p : problems) what += "\n  - " + p;
    throw value_error(what);
  }
  state_ = std::move(state);
}

// ---- sgd ----

template <class T>
sgd<T>::sgd(param_store<T>& params, double lr, sgd_options options) : optimizer<T>(params, lr), options_(options) {
  require(lr >= 0, "sgd: lr must be >= 0, got " + number(lr));
  require(options.momentum >= 0, "sgd: momentum must be >= 0, got " + number(options.momentum));
  require(options.weight_decay >= 0, "sgd: weight_decay must be >= 0, got " + number(options.weight_decay));
  require(std::isfinite(options.dampening), "sgd: dampening must be finite");
  require(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
          "sgd: nesterov momentum needs momentum > 0 and dampening = 0");
}

template <class T>
std::vector<std::string> sgd<T>::buffer_kinds() const {
  if (options_.momentum == 0) return {};
  return {"momentum_buffer"};
}

template <class T>
std::map<std::string, std::string> sgd<T>::hyperparameters() const {
  return {{"lr", number(this->lr_)},
          {"momentum", number(options_.momentum)},
          {"dampening", number(options_.dampening)},
          {"weight_decay", number(options_.weight_decay)},
          {"nesterov", options_.nesterov ? "true" : "false"}};
}

template <class T>
void sgd<T>::update() {
  const T lr = static_cast<T>(this->lr_), wd = static_cast<T>(options_.weight_decay);
  const T momentum = static_cast<T>(options_.momentum), keep = static_cast<T>(1 - options_.dampening);
  for (auto& [name, e] : this->params()) {
    T* p = e.value.data();
    const T* grad = e.grad.data();
    const std::int64_t n = e.value.size();
    tensor<T>* buf = nullptr;
    bool first = false;
    if (options_.momentum != 0) {
      buf = this->buffer("momentum_buffer", name);
      first = buf == nullptr;
      if (first) buf = &this->buffer_or_zeros("momentum_buffer", name, e.value.dims());
    }
    for (std::int64_t i = 0; i < n; ++i) {
      T g = grad[i];
      if (options_.weight_decay != 0) g = g + wd * p[i];
      if (buf) {
        T& b = (*buf)[i];
        b = first ? g : b * momentum + keep * g;  // the first step copies g, as PyTorch clones d_p
        g = options_.nesterov ? g + momentum * b : b;
      }
      p[i] = p[i] + (-lr) * g;
    }
  }
}

// ---- adam / adamw ----

template <class T>
adam<T>::adam(param_store<T>& params, adam_options options) : adam(params, options, false) {}

template <class T>
adam<T>::adam(param_store<T>& params, adam_options options, bool decoupled)
    : optimizer<T>(params, options.lr), options_(options), decoupled_(decoupled) {
  const std::string who(name());
  require(options.lr >= 0, who + ": lr must be >= 0, got " + number(options.lr));
  require(options.eps >= 0, who + ": eps must be >= 0, got " + number(options.eps));
  require(options.beta1 >= 0 && options.beta1 < 1, who + ": beta1 must be in [0, 1), got " + number(options.beta1));
  require(options.beta2 >= 0 && options.beta2 < 1, who + ": beta2 must be in [0, 1), got " + number(options.beta2));
  require(options.weight_decay >= 0, who + ": weight_decay must be >= 0, got " + number(options.weight_decay));
}

template <class T>
std::map<std::string, std::string> adam<T>::hyperparameters() const {
  return {{"lr", number(this->lr_)},
          {"beta1", number(options_.beta1)},
          {"beta2", number(options_.beta2)},
          {"eps", number(options_.eps)},
          {"weight_decay", number(options_.weight_decay)}};
}

// The constants of one Adam step.
template <class T>
struct adam_step {
  bool decoupled, l2;  // AdamW's decay of p, or Adam's L2 term in g
  T decay, wd, beta1, beta2, one_minus_beta1, one_minus_beta2, bias_correction2_sqrt, eps, step_size;
};

// One Adam step over n elements (compiled for the CPU's vector width, ops/vector_isa.hpp).
// The constants are copied out of `k` (taken by value) and the arrays marked unaliased, so that
// the loop vectorises: read through a reference, every constant would be reloaded after each
// store, and no loop version could be chosen once.
template <class T>
LOOM_VECTOR_CLONES void adam_elements(const adam_step<T> k, T* __restrict p, const T* __restrict grad, T* __restrict m,
                                      T* __restrict v, std::int64_t n) {
  const T decay = k.decoupled ? k.decay : T(1), wd = !k.decoupled && k.l2 ? k.wd : T(0);
  const T beta1 = k.beta1, beta2 = k.beta2, c1 = k.one_minus_beta1, c2 = k.one_minus_beta2;
  const T bc2 = k.bias_correction2_sqrt, eps = k.eps, step = -k.step_size;
  for (std::int64_t i = 0; i < n; ++i) {
    const T pi = p[i] * decay;   // AdamW: p ← p (1 − lr·wd); Adam: decay 1
    const T g = grad[i] + wd * p[i];  // Adam's L2 term; AdamW: wd 0
    const T mi = m[i] * beta1 + c1 * g;
    const T vi = v[i] * beta2 + c2 * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + step * (mi / (std::sqrt(vi) / bc2 + eps));
  }
}

template <class T>
void adam<T>::update() {
  const double t = static_cast<double>(this->state_.step);
  const double bias_correction1 = 1 - std::pow(options_.beta1, t);
  const double bias_correction2 = 1 - std::pow(options_.beta2, t);
  const T step_size = static_cast<T>(this->lr_ / bias_correction1);
  const T bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
  const T beta1 = static_cast<T>(options_.beta1), beta2 = static_cast<T>(options_.beta2);
  const T one_minus_beta1 = static_cast<T>(1 - options_.beta1), one_minus_beta2 = static_cast<T>(1 - options_.beta2);
  const T eps = static_cast<T>(options_.eps), wd = static_cast<T>(options_.weight_decay);
  const T decay = static_cast<T>(1 - this->lr_ * options_.weight_decay);  // AdamW's p *= 1 − lr·wd
  for (auto& [name, e] : this->params()) {
    T* p = e.value.data();
    const T* grad = e.grad.data();
    T* m = this->buffer_or_zeros("exp_avg", name, e.value.dims()).data();
    T* v = this->buffer_or_zeros("exp_avg_sq", name, e.value.dims()).data();
    const adam_step<T> k{decoupled_, options_.weight_decay != 0, decay, wd, beta1, beta2, one_minus_beta1,
                         one_minus_beta2, bias_correction2_sqrt, eps, step_size};
    adam_elements(k, p, grad, m, v, e.value.size());
  }
}

template <class T>
adamw<T>::adamw(param_store<T>& params, adamw_options o)
    : adam<T>(params, {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}, true) {}

// ---- clipping ----

template <class T>
double grad_norm(const param_store<T>& params) {
  double sum_sq = 0;
  for (const auto& [name, e] : params)
    for (T g : e.grad.values()) sum_sq += static_cast<double>(g) * static_cast<double>(g);
  return std::sqrt(sum_sq);
}

template <class T>
double clip_grad_norm(param_store<T>& params, double max_norm) {
  require(max_norm >= 0, "clip_grad_norm: max_norm must be >= 0, got " + number(max_norm));
  const double total_norm = grad_norm(params);
  const double coef = max_norm / (total_norm + 1e-6);
  if (coef < 1) {
    const T scale = static_cast<T>(coef);
    for (auto& [name, e] : params)
      for (T& g : e.grad.values()) g *= scale;
  }
  return total_norm;
}

// ---- schedules ----

noam_schedule::noam_schedule(double d_model, double warmup, double factor)
    : d_model(d_model), warmup(warmup), factor(factor) {
  require(d_model >= 1, "noam_schedule: d_model must be >= 1, got " + number(d_model));
  require(warmup >= 1, "noam_schedule: warmup must be >= 1 step, got " + number(warmup));
}

double noam_schedule::operator()(std::int64_t step) const {
  const double s = static_cast<double>(std::max<std::int64_t>(step, 1));
  return factor * std::pow(d_model, -0.5) * std::min(std::pow(s, -0.5), s * std::pow(warmup, -1.5));
}

warmup_cosine::warmup_cosine(double peak_lr, std::int64_t warmup, std::int64_t total, double min_lr)
    : peak_lr(peak_lr), warmup(warmup), total(total), min_lr(min_lr) {
  require(warmup >= 0 && warmup < total, "warmup_cosine: needs 0 <= warmup < total, got warmup " +
                                             std::to_string(warmup) + ", total " + std::to_string(total));
  require(min_lr <= peak_lr, "warmup_cosine: min_lr " + number(min_lr) + " is above peak_lr " + number(peak_lr));
}

double warmup_cosine::operator()(std::int64_t step) const {
  if (step < warmup)
    return peak_lr * static_cast<double>(std::max<std::int64_t>(step, 0)) / static_cast<double>(warmup);
  if (step >= total) return min_lr;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return min_lr + (peak_lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

#define LOOM_OPTIM_INSTANTIATE(T)                          \
  template class optimizer<T>;                             \
  template class sgd<T>;                                   \
  template class adam<T>;                                  \
  template class adamw<T>;                                 \
  template double clip_grad_norm(param_store<T>&, double); \
  template double grad_norm(const param_store<T>&);
LOOM_OPTIM_INSTANTIATE(float)
LOOM_OPTIM_INSTANTIATE(double)
#undef LOOM_OPTIM_INSTANTIATE

}  // namespace loom
