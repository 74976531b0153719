// precision_report: the graph in float32 against the same graph in double (see
// precision_report.hpp).
#include "loom/graph/precision_report.hpp"

#include <cmath>
#include <sstream>

#include "loom/core/errors.hpp"
#include "loom/core/random.hpp"
#include "loom/graph/executor.hpp"

namespace loom {

namespace {

precision_entry compare(std::string name, tensor_view<const float> got, tensor_view<const double> want) {
  precision_entry e;
  e.name = std::move(name);
  e.elements = want.size();
  if (got.size() != want.size())
    throw shape_error("precision_report: " + e.name + " has " + std::to_string(got.size()) +
                      " elements in float and " + std::to_string(want.size()) + " in double");
  std::int64_t worst = -1, mismatch = -1;  // the largest finite error; the first non-finite mismatch
  double err2 = 0, ref2 = 0;
  for (std::int64_t i = 0; i < want.size(); ++i) {
    const double w = want.data[i], g = got.data[i];
    if (!std::isfinite(w) || !std::isfinite(g)) {
      const bool same = (std::isnan(w) && std::isnan(g)) || w == g;  // NaN for NaN, ±inf for itself
      if (!same && mismatch < 0) mismatch = i;
      continue;
    }
    const double d = std::abs(g - w);
    e.scale = std::max(e.scale, std::abs(w));
    err2 += d * d;
    ref2 += w * w;
    if (worst < 0 || d > e.max_abs) {
      e.max_abs = d;
      worst = i;
    }
  }
  if (mismatch >= 0) {
    e.max_abs = e.relative = e.norm_relative = INFINITY;
    worst = mismatch;
  } else {
    e.relative = e.max_abs == 0 ? 0 : e.scale == 0 ? INFINITY : e.max_abs / e.scale;
    e.norm_relative = err2 == 0 ? 0 : ref2 == 0 ? INFINITY : std::sqrt(err2 / ref2);
  }
  if (worst >= 0) e.worst_index = want.dims.index_of(worst);
  return e;
}

std::string output_name(const plan_view& plan, std::size_t k) {
  const node_desc* d = plan.order[static_cast<std::size_t>(plan.roots[k])];
  return d->op->is_named_output ? "output \"" + std::string(d->name) + "\"" : "output " + std::to_string(k);
}

}  // namespace

const precision_entry& precision_result::at(const std::string& name) const {
  std::string names;
  for (const auto& e : entries) {
    if (e.name == name) return e;
    names += (names.empty() ? "" : ", ") + e.name;
  }
  throw missing_error("precision_result: no entry \"" + name + "\" (entries: " + names + ")");
}

double precision_result::worst_relative() const {
  double w = 0;
  for (const auto& e : entries) w = std::max(w, e.relative);
  return w;
}

double precision_result::worst_norm_relative() const {
  double w = 0;
  for (const auto& e : entries) w = std::max(w, e.norm_relative);
  return w;
}

std::string precision_result::str() const {
  std::ostringstream s;
  s.precision(3);
  for (const auto& e : entries) {
    s << e.name << ": " << e.elements << " elements, max |float - double| " << e.max_abs << " (relative "
      << e.relative << " of max |double| " << e.scale << "), norm-wise " << e.norm_relative;
    if (!e.worst_index.empty()) {
      s << " at [";
      for (std::size_t i = 0; i < e.worst_index.size(); ++i) s << (i ? ", " : "") << e.worst_index[i];
      s << "]";
    }
    s << "\n";
  }
  return s.str();
}

precision_result precision_report(const plan_view& plan, const param_store<double>& params, std::span<const feed> feeds,
                                  precision_options opt) {
  // the float run's parameters and real feeds: the double ones, rounded once
  param_store<double> ref_params = params;  // the reference run's own copy (backward writes its gradients)
  param_store<float> low_params;
  for (int i = 0; i < plan.size(); ++i) {
    const node_desc* d = plan.order[static_cast<std::size_t>(i)];
    if (d->op->role != node_role::param || low_params.contains(d->name)) continue;
    const tensor<double>& v = params.value(d->name);  // missing_error names it
    tensor<float> f(v.dims());
    for (std::int64_t e = 0; e < v.size(); ++e) f[e] = static_cast<float>(v[e]);
    low_params.set(std::string(d->name), std::move(f));
  }
  std::vector<tensor<float>> low_inputs;
  low_inputs.reserve(feeds.size());
  std::vector<feed> low_feeds;
  std::vector<std::string> real_names;
  for (const feed& f : feeds) {
    if (f.type() == storage::f32)
      throw value_error("precision_report: the feed \"" + f.name() +
                        "\" is float; give real inputs in double (the reference), they are rounded for the float run");
    if (f.type() != storage::f64) {
      low_feeds.push_back(f);
      continue;
    }
    tensor<float> t(f.dims());
    const auto* src = static_cast<const double*>(f.data());
    for (std::int64_t e = 0; e < t.size(); ++e) t[e] = static_cast<float>(src[e]);
    low_inputs.push_back(std::move(t));
    low_feeds.emplace_back(f.name(), low_inputs.back());
    real_names.push_back(f.name());
  }

  if (opt.weights == weight_precision::int8 && opt.gradients)
    throw value_error("precision_report: weight_precision::int8 is for inference: set gradients = false");
  exec_options eo;
  eo.threads = opt.threads;
  eo.training = false;  // the same function in both runs (no dropout)
  eo.input_grads = opt.gradients && opt.inputs;
  eo.inference = !opt.gradients;
  if (opt.fuse >= 0) eo.fuse = opt.fuse != 0;
  executor<double> ref(plan, ref_params, eo);
  eo.precision = opt.precision;
  eo.weights = opt.weights;
  executor<float> low(plan, low_params, eo);
  ref.forward(feeds);
  low.forward(low_feeds);

  precision_result r;
  for (std::size_t k = 0; k < plan.roots.size(); ++k)
    r.entries.push_back(compare(output_name(plan, k), low.output(static_cast<int>(k)), ref.output(static_cast<int>(k))));
  if (!opt.gradients) return r;

  rng gen(opt.seed);
  std::vector<tensor<double>> cot;
  std::vector<tensor<float>> cot_low;
  for (std::size_t k = 0; k < plan.roots.size(); ++k) {
    auto y = ref.output(static_cast<int>(k));
    tensor<double> w(y.dims);
    tensor<float> wl(y.dims);
    for (std::int64_t e = 0; e < w.size(); ++e) {
      w[e] = y.size() == 1 ? 1.0 : gen.uniform(-1.0, 1.0);
      wl[e] = static_cast<float>(w[e]);
    }
    cot.push_back(std::move(w));
    cot_low.push_back(std::move(wl));
  }
  ref.backward(cot);
  low.backward(cot_low);
  for (int i = 0; i < plan.size(); ++i) {
    const node_desc* d = plan.order[static_cast<std::size_t>(i)];
    if (d->op->role != node_role::param) continue;
    r.entries.push_back(compare("grad param \"" + std::string(d->name) + "\"", low_params.grad(d->name).view(),
                                ref_params.grad(d->name).view()));
  }
  if (opt.inputs)
    for (const std::string& name : real_names) {
      const int node = plan.input_index(name);
      if (node < 0 || !plan.from_input[static_cast<std::size_t>(node)]) continue;  // no gradient reaches it
      r.entries.push_back(compare("grad input \"" + name + "\"", low.input_grad(name), ref.input_grad(name)));
    }
  return r;
}

}  // namespace loom
