// Optimizers, gradient clipping and schedules. The arithmetic follows PyTorch 1.13's
// single-tensor code paths op by op: scalars (bias corrections, step sizes) are computed in
// double and used in T, as PyTorch passes Python floats to its T kernels.
#include "loom/train/optim.hpp"

#include "../ops/vector_isa.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
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
  // Check every shape before changing anything (a parameter set() to another shape since).
  for (const auto& [param, e] : params_) {
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
  try {
    // pieces of at most `grain` elements (none spans two parameters), for for_elements: each
    // parameter where the store has it (the optimizer never moves one), its buffers where
    // packed() lays them out (one after the other, flat_block's layout)
    constexpr std::int64_t grain = 16384;  // 64 KiB of floats per array: a TBB task's worth
    pieces_.clear();
    std::int64_t buffer = 0;
    std::size_t k = 0;
    for (auto& [name, e] : params_) {
      if (owns(k)) {
        const std::int64_t n = e.value.size();
        for (std::int64_t at = 0; at < n; at += grain)
          pieces_.push_back({e.value.data() + at, e.grad.data() + at, buffer + at, std::min(grain, n - at), k});
        buffer = flat_block<T>::next_offset(buffer + n);
      }
      ++k;
    }
    prepare();
  } catch (...) {
    if (state_.step == 0) state_.buffers.clear();  // no half-made buffers before the first step
    throw;
  }
  ++state_.step;
  update();
}

template <class T>
T* optimizer<T>::packed(const std::string& kind, std::vector<char>* created) {
  auto& by_param = state_.buffers[kind];
  flat_block<T>& block = blocks_[kind];
  if (created) created->assign(params_.size(), 0);
  const std::size_t owned = std::min(end_, params_.size()) - std::min(first_, params_.size());
  {  // every step after the first: the buffers are where the last step left them (no allocation)
    bool in_place = by_param.size() == owned;
    std::size_t k = 0, j = 0;
    auto it = by_param.begin();
    for (const auto& [name, e] : params_) {
      if (!in_place) break;
      if (!owns(k++)) continue;
      in_place = it->first == name && block.holds(j++, it->second);
      ++it;
    }
    if (in_place && j == block.segments().size()) return block.elements().data();
  }
  std::vector<tensor<T>*> buffers;
  std::vector<dims_t> shapes;
  std::vector<const std::string*> made;  // buffers added now, empty until the block holds them
  buffers.reserve(params_.size());
  shapes.reserve(params_.size());
  std::size_t k = 0;
  auto it = by_param.begin();  // both maps are in name order: one walk over each
  for (const auto& [name, e] : params_) {
    if (!owns(k)) {
      ++k;
      continue;
    }
    while (it != by_param.end() && it->first < name) ++it;  // a buffer of no parameter (load_state refuses it)
    if (it == by_param.end() || it->first != name) {
      it = by_param.emplace_hint(it, name, tensor<T>());
      made.push_back(&name);
      if (created) (*created)[k] = 1;
    }
    buffers.push_back(&it->second);
    shapes.push_back(e.value.dims());
    ++it;
    ++k;
  }
  if (!block.holds(buffers)) {
    // New buffers are made as zeros in the new block: never a tensor of their own first, which
    // would be the size of all parameters once more at the peak of the first step.
    try {
      block.pack(buffers, shapes);
    } catch (...) {
      for (const std::string* name : made) by_param.erase(*name);
      throw;
    }
  }
  return block.elements().data();
}

template <class T>
template <class Fn>
void optimizer<T>::for_elements(const Fn& fn) const {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, pieces_.size()), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i) fn(pieces_[i]);
  });
}

template <class T>
std::vector<std::string> optimizer<T>::state_differences(const optimizer_state<T>& state, bool whole) const {
  std::vector<std::string> problems;
  if (state.step < 0) problems.push_back("step count " + std::to_string(state.step) + " is negative");
  if (state.step == std::numeric_limits<std::int64_t>::max())
    problems.push_back("step count " + std::to_string(state.step) + " leaves no room for another step");
  const auto kinds = buffer_kinds();
  const std::set<std::string> known(kinds.begin(), kinds.end());
  const auto owned = owned_names();
  for (const auto& [kind, by_param] : state.buffers) {
    if (!known.contains(kind)) {
      problems.push_back(std::string(name()) + " keeps no \"" + kind + "\" buffers");
      continue;
    }
    for (const auto& [param, buf] : by_param) {
      if (!params_.contains(param))
        problems.push_back(kind + " of \"" + param + "\": no such parameter");
      else if (!whole && !owned.contains(param))
        problems.push_back(kind + " of \"" + param + "\": outside this optimizer's shard");
      else if (!(buf.dims() == params_.value(param).dims()))
        problems.push_back(kind + " of \"" + param + "\": shape " + buf.dims().str() + ", the parameter's " +
                           params_.value(param).dims().str());
      else if (state.step == 0)
        problems.push_back(kind + " of \"" + param + "\": a buffer at step 0, before any update");
      else if (std::string p = value_problem(kind, buf); !p.empty())
        problems.push_back(kind + " of \"" + param + "\": " + p);
    }
  }
  if (state.step > 0)
    for (const auto& kind : kinds) {
      std::size_t index = 0;
      for (const auto& [param, e] : params_) {
        if (!whole && !owns(index++)) continue;
        auto k = state.buffers.find(kind);
        if (k == state.buffers.end() || !k->second.contains(param))
          problems.push_back("missing " + kind + " of \"" + param + "\" (shape " + e.value.dims().str() + ") at step " +
                             std::to_string(state.step));
      }
    }
  return problems;
}

template <class T>
std::set<std::string_view, std::less<>> optimizer<T>::owned_names() const {
  std::set<std::string_view, std::less<>> owned;
  std::size_t k = 0;
  for (const auto& [name, e] : params_)
    if (owns(k++)) owned.insert(name);
  return owned;
}

template <class T>
void optimizer<T>::shard(std::size_t first, std::size_t end) {
  const std::size_t n = params_.size();
  require(first <= end && end <= n, std::string(name()) + ": shard [" + std::to_string(first) + ", " +
                                        std::to_string(end) + ") is not a range of the store's " +
                                        std::to_string(n) + " parameters");
  first_ = first;
  end_ = end;
  // The others' buffers go now; the memory of their block goes when the next step lays out
  // the shard's buffers in blocks of their own.
  const auto owned = owned_names();
  for (auto& [kind, by_param] : state_.buffers)
    std::erase_if(by_param, [&](const auto& b) { return !owned.contains(b.first); });
  for (auto& [kind, block] : blocks_) block = flat_block<T>();
}

template <class T>
std::pair<std::size_t, std::size_t> optimizer<T>::shard() const {
  const std::size_t n = params_.size();
  return {std::min(first_, n), std::min(end_, n)};
}

template <class T>
bool optimizer<T>::sharded() const {
  const auto [first, end] = shard();
  return first != 0 || end != params_.size();
}

template <class T>
std::string optimizer<T>::value_problem(const std::string&, const tensor<T>&) const {
  return {};  // non-finite values are the loaders' call (load_options::allow_non_finite)
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
void sgd<T>::prepare() {
  buf_ = options_.momentum != 0 ? this->packed("momentum_buffer", &fresh_) : nullptr;
}

// The constants of one SGD step; `first`: the momentum buffer is new (PyTorch clones d_p).
template <class T>
struct sgd_step {
  bool momentum, nesterov, first, decay;
  T lr, wd, beta, keep;
};

// One SGD step over n elements, compiled like adam_elements (below).
template <class T>
LOOM_VECTOR_CLONES void sgd_elements(const sgd_step<T> k, T* __restrict p, const T* __restrict grad,
                                     T* __restrict buf, std::int64_t n) {
  const T lr = k.lr, wd = k.wd, momentum = k.beta, keep = k.keep;
  for (std::int64_t i = 0; i < n; ++i) {
    T g = grad[i];
    if (k.decay) g = g + wd * p[i];
    if (k.momentum) {
      const T b = k.first ? g : buf[i] * momentum + keep * g;
      buf[i] = b;
      g = k.nesterov ? g + momentum * b : b;
    }
    p[i] = p[i] + (-lr) * g;
  }
}

template <class T>
void sgd<T>::update() {
  const bool momentum = options_.momentum != 0;
  T* const buf = buf_;
  const sgd_step<T> base{momentum,
                         options_.nesterov,
                         false,
                         options_.weight_decay != 0,
                         static_cast<T>(this->lr_),
                         static_cast<T>(options_.weight_decay),
                         static_cast<T>(options_.momentum),
                         static_cast<T>(1 - options_.dampening)};
  this->for_elements([&](const typename optimizer<T>::piece& w) {
    sgd_step<T> k = base;
    k.first = momentum && fresh_[w.param] != 0;  // its buffer was made this step
    sgd_elements(k, w.value, w.grad, momentum ? buf + w.buffer : nullptr, w.n);
  });
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
std::string adam<T>::value_problem(const std::string& kind, const tensor<T>& buffer) const {
  if (kind != "exp_avg_sq") return {};
  for (std::int64_t i = 0; i < buffer.size(); ++i)
    if (buffer[i] < 0)
      return "element " + std::to_string(i) + " is " + number(buffer[i]) + ": a second moment is never negative";
  return {};
}

template <class T>
void adam<T>::prepare() {
  m_ = this->packed("exp_avg");
  v_ = this->packed("exp_avg_sq");
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
  const adam_step<T> k{decoupled_, options_.weight_decay != 0, decay, wd, beta1, beta2, one_minus_beta1,
                       one_minus_beta2, bias_correction2_sqrt, eps, step_size};
  T* const m = m_;
  T* const v = v_;
  this->for_elements([&](const typename optimizer<T>::piece& w) {
    adam_elements(k, w.value, w.grad, m + w.buffer, v + w.buffer, w.n);
  });
}

template <class T>
adamw<T>::adamw(param_store<T>& params, adamw_options o)
    : adam<T>(params, {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}, true) {}

// ---- clipping ----

// The sum runs in name order either way: over a packed store's block it also adds the gaps'
// zeros, which leave a sum unchanged.
template <class T>
double grad_norm(const param_store<T>& params) {
  double sum_sq = 0;
  const auto add = [&](std::span<const T> gs) {
    for (T g : gs) sum_sq += static_cast<double>(g) * static_cast<double>(g);
  };
  if (params.packed())
    add(params.grad_block().elements());
  else
    for (const auto& [name, e] : params) add(e.grad.values());
  return std::sqrt(sum_sq);
}

template <class T>
double clip_grad_norm(param_store<T>& params, double max_norm) {
  require(max_norm >= 0, "clip_grad_norm: max_norm must be >= 0, got " + number(max_norm));
  const double total_norm = grad_norm(params);
  const double coef = max_norm / (total_norm + 1e-6);
  if (coef < 1) {
    const T scale = static_cast<T>(coef);
    const auto mul = [&](std::span<T> gs) {
      for (T& g : gs) g *= scale;
    };
    if (params.packed())
      mul(params.grad_block().elements());  // the gaps stay zero
    else
      for (auto& [name, e] : params) mul(e.grad.values());
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
