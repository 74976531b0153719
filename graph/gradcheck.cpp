// gradcheck: analytic gradients (one backward pass) against central finite differences
// (two forward passes per scalar), in double.
#include "loom/graph/gradcheck.hpp"

#include <cmath>
#include <sstream>

#include "loom/core/random.hpp"
#include "loom/graph/executor.hpp"

namespace loom {

std::string gradcheck_result::str() const {
  std::ostringstream s;
  s.precision(6);
  if (ok) {
    s << "gradcheck passed: " << checked << " gradients match finite differences";
    if (!worst_name.empty()) s << " (closest to the tolerance: " << worst_name;
  } else {
    s << "gradcheck FAILED: " << failed << " of " << checked << " gradients differ; worst: " << worst_name;
  }
  if (!worst_name.empty()) {
    s << "[";
    for (std::size_t i = 0; i < worst_index.size(); ++i) s << (i ? ", " : "") << worst_index[i];
    s << "] analytic " << analytic << " vs numeric " << numeric;
    if (ok) s << ")";
  }
  return s.str();
}

gradcheck_result gradcheck(const plan_view& plan, param_store<double>& params, std::span<const feed> feeds,
                           gradcheck_options opt) {
  // Real inputs are copied so that they can be perturbed; other feeds pass through.
  std::vector<tensor<double>> real_inputs;
  std::vector<std::string> real_names;
  std::vector<feed> local;
  for (const feed& f : feeds) {
    if (f.type() == storage::f64) {
      tensor<double> t(f.dims());
      const auto* src = static_cast<const double*>(f.data());
      std::copy(src, src + t.size(), t.data());
      real_inputs.push_back(std::move(t));
      real_names.push_back(f.name());
    }
  }
  std::size_t r = 0;
  for (const feed& f : feeds) {
    if (f.type() == storage::f64) local.emplace_back(f.name(), real_inputs[r++]);
    else local.push_back(f);
  }

  exec_options eo;
  eo.threads = opt.threads;
  eo.input_grads = opt.check_inputs;
  if (opt.fuse >= 0) eo.fuse = opt.fuse != 0;
  executor<double> ex(plan, params, eo);
  ex.forward(local);

  // cotangents: 1 for a one-element output, seeded uniform(-1, 1) otherwise
  rng gen(opt.seed);
  std::vector<tensor<double>> cot;
  for (std::size_t k = 0; k < plan.roots.size(); ++k) {
    auto y = ex.output(static_cast<int>(k));
    tensor<double> w(y.dims);
    for (std::int64_t e = 0; e < w.size(); ++e) w[e] = y.size() == 1 ? 1.0 : gen.uniform(-1.0, 1.0);
    cot.push_back(std::move(w));
  }
  ex.backward(cot);
  // analytic input gradients, read now (the next forward() ends the backward's results)
  std::vector<std::vector<double>> input_analytic(real_inputs.size());
  std::vector<bool> reachable(real_inputs.size(), false);
  if (opt.check_inputs) {
    for (std::size_t k = 0; k < real_inputs.size(); ++k) {
      const int node = plan.input_index(real_names[k]);
      // an input no gradient reaches (it does not touch a real output) has none to check
      if (node < 0 || !plan.from_input[node]) continue;
      auto g = ex.input_grad(real_names[k]);
      input_analytic[k].assign(g.data, g.data + g.size());
      reachable[k] = true;
    }
  }

  auto loss = [&] {
    ex.forward(local);
    double l = 0;
    for (std::size_t k = 0; k < cot.size(); ++k) {
      auto y = ex.output(static_cast<int>(k));
      for (std::int64_t e = 0; e < y.size(); ++e) l += cot[k][e] * y[e];
    }
    return l;
  };

  gradcheck_result res;
  auto check = [&](const std::string& name, double* x, const dims_t& d, const std::vector<double>& analytic) {
    for (std::int64_t e = 0; e < d.size(); ++e) {
      const double saved = x[e];
      x[e] = saved + opt.eps;
      const double plus = loss();
      x[e] = saved - opt.eps;
      const double minus = loss();
      x[e] = saved;
      const double numeric = (plus - minus) / (2 * opt.eps);
      const double a = analytic[static_cast<std::size_t>(e)];
      const double excess = std::abs(a - numeric) - (opt.atol + opt.rtol * std::abs(numeric));
      ++res.checked;
      if (!(excess <= 0)) {  // NaN fails too
        ++res.failed;
        res.ok = false;
      }
      if (!(excess <= res.worst_excess) || res.worst_name.empty()) {
        res.worst_excess = std::isnan(excess) ? 1e300 : excess;
        res.worst_name = name;
        res.worst_index = d.index_of(e);
        res.analytic = a;
        res.numeric = numeric;
      }
    }
  };

  // parameters of this graph, in plan order
  for (int i = 0; i < plan.size(); ++i) {
    const node_desc* d = plan.order[i];
    if (d->op->role != node_role::param) continue;
    auto& t = params.value(d->name);
    const auto& g = params.grad(d->name);
    std::vector<double> analytic(g.values().begin(), g.values().end());
    check("param \"" + std::string(d->name) + "\"", t.data(), t.dims(), analytic);
  }
  if (opt.check_inputs) {
    for (std::size_t k = 0; k < real_inputs.size(); ++k)
      if (reachable[k])
        check("input \"" + real_names[k] + "\"", real_inputs[k].data(), real_inputs[k].dims(), input_analytic[k]);
  }
  return res;
}

}  // namespace loom
