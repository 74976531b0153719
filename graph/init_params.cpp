// Parameter initialisation: PyTorch's defaults for the layer that owns each parameter
// (see init_kind), from a seeded generator.
#include <cmath>
#include <string>
#include <unordered_set>

#include "loom/core/errors.hpp"

#include "loom/core/random.hpp"
#include "loom/graph/graph.hpp"

namespace loom {

template <class T>
void init_params(const plan_view& plan, param_store<T>& store, std::uint64_t seed,
                 std::span<const std::pair<std::string_view, std::int64_t>> dims_by_name) {
  // a named dim of a parameter (dyn<"V">) takes its size from dims_by_name
  auto size_of = [&](const node_desc& d, int axis) -> std::int64_t {
    const dim_expr& e = d.dims[axis];
    if (e.is_fixed()) return e.constant;
    for (const auto& [name, size] : dims_by_name)
      if (e.n_syms == 1 && name == e.syms[0]) {
        if (size < 0) throw value_error("init_params: dim \"" + std::string(name) + "\" cannot be negative");
        return size;
      }
    throw value_error("init_params: parameter \"" + std::string(d.name) + "\" has the named dim \"" +
                      std::string(e.syms[0]) + "\": give its size (make_params(seed, {{\"" + std::string(e.syms[0]) +
                      "\", n}}))");
  };
  // First every new parameter, made as zeros in the store's blocks (param_store::add_zeros:
  // the values are never held twice), then their values, drawn in plan order.
  std::vector<const node_desc*> fresh;
  std::vector<std::pair<std::string, dims_t>> added;
  std::unordered_set<std::string_view> seen;
  for (int i = 0; i < plan.size(); ++i) {
    const node_desc* d = plan.order[static_cast<std::size_t>(i)];
    if (d->op->role != node_role::param || store.contains(d->name)) continue;
    if (!seen.insert(d->name).second) continue;  // a parameter read by several nodes: once
    dims_t dims;
    dims.rank = d->rank;
    for (int a = 0; a < d->rank; ++a) dims.d[a] = size_of(*d, a);
    fresh.push_back(d);
    added.emplace_back(std::string(d->name), dims);
  }
  if (!added.empty()) store.add_zeros(added);
  rng gen(seed);
  for (const node_desc* d : fresh) {
    tensor<T>& t = store.value(d->name);
    const dims_t& dims = t.dims();
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
          const long fan = load_attrs<param_attrs>(*d).fan_in;
          double b = 1.0 / std::sqrt(static_cast<double>(fan > 0 ? fan : 1));
          v = gen.uniform(-b, b);
          break;
        }
        case init_kind::normal_std:
          v = gen.normal() * static_cast<double>(load_attrs<param_attrs>(*d).fan_in) / 1000.0;
          break;
        case init_kind::xavier_uniform: {
          double b = std::sqrt(6.0 / (fan_in + fan_out));
          v = gen.uniform(-b, b);
          break;
        }
      }
      t[e] = static_cast<T>(v);
    }
  }
}

template <class T>
void init_params(const plan_view& plan, param_store<T>& store, std::uint64_t seed) {
  init_params(plan, store, seed, {});
}

template void init_params<float>(const plan_view&, param_store<float>&, std::uint64_t);
template void init_params<double>(const plan_view&, param_store<double>&, std::uint64_t);
template void init_params<float>(const plan_view&, param_store<float>&, std::uint64_t,
                                 std::span<const std::pair<std::string_view, std::int64_t>>);
template void init_params<double>(const plan_view&, param_store<double>&, std::uint64_t,
                                  std::span<const std::pair<std::string_view, std::int64_t>>);

}  // namespace loom
