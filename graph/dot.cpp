// Graphviz DOT output of a plan, and parameter initialisation.
#include <cmath>
#include <sstream>

#include "../ops/kernel.hpp"
#include "loom/core/random.hpp"
#include "loom/graph/graph.hpp"

namespace loom {

std::string to_dot(const plan_view& plan) {
  std::ostringstream o;
  o << "digraph loom {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  for (int i = 0; i < plan.size(); ++i) {
    const node_desc* d = plan.order[static_cast<std::size_t>(i)];
    const std::string dims = plan.shape_text(i);
    o << "  n" << i << " [label=\"";
    if (d->kind == op_kind::input) o << "input " << d->name << "\\n" << dims << "\", shape=box, style=filled, fillcolor=\"#dbe9f6\"";
    else if (d->kind == op_kind::param) o << d->name << "\\n" << dims << "\", shape=box, style=\"rounded,filled\", fillcolor=\"#fde9c9\"";
    else o << ops::op_name(d->kind) << "\\n" << dims << "\", shape=ellipse";
    o << "];\n";
  }
  for (int i = 0; i < plan.size(); ++i)
    for (int j : plan.inputs(i)) o << "  n" << j << " -> n" << i << ";\n";
  for (int r : plan.roots) o << "  n" << r << " [peripheries=2];\n";
  o << "}\n";
  return o.str();
}

template <class T>
void init_params(const plan_view& plan, param_store<T>& store, std::uint64_t seed) {
  rng gen(seed);
  for (int i = 0; i < plan.size(); ++i) {
    const node_desc* d = plan.order[static_cast<std::size_t>(i)];
    if (d->kind != op_kind::param || store.contains(d->name)) continue;
    dims_t dims;
    dims.rank = d->rank;
    for (int a = 0; a < d->rank; ++a) dims.d[a] = d->dims[a].constant;
    tensor<T> t(dims);
    const double fan_in = d->rank >= 2 ? static_cast<double>(dims.d[1]) : 1.0;
    const double fan_out = d->rank >= 1 ? static_cast<double>(dims.d[0]) : 1.0;
    for (std::int64_t e = 0; e < t.size(); ++e) {
      double v = 0;
      switch (d->init) {
        case init_kind::zeros: v = 0; break;
        case init_kind::ones: v = 1; break;
        case init_kind::normal: v = gen.normal(); break;
        case init_kind::linear_weight: {
          double b = 1.0 / std::sqrt(fan_in);
          v = gen.uniform(-b, b);
          break;
        }
        case init_kind::linear_bias: {
          double b = 1.0 / std::sqrt(static_cast<double>(d->iattr[0] > 0 ? d->iattr[0] : 1));
          v = gen.uniform(-b, b);
          break;
        }
        case init_kind::xavier_uniform: {
          double b = std::sqrt(6.0 / (fan_in + fan_out));
          v = gen.uniform(-b, b);
          break;
        }
      }
      t[e] = static_cast<T>(v);
    }
    store.set(std::string(d->name), std::move(t));
  }
}

template void init_params<float>(const plan_view&, param_store<float>&, std::uint64_t);
template void init_params<double>(const plan_view&, param_store<double>&, std::uint64_t);

}  // namespace loom
