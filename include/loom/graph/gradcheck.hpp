// gradcheck: every analytic gradient against central finite differences, in double.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "loom/core/params.hpp"
#include "loom/graph/feed.hpp"
#include "loom/graph/plan.hpp"

namespace loom {

/// Tolerances and settings of gradcheck (PyTorch's defaults).
struct gradcheck_options {
  double eps = 1e-6;         // finite-difference step
  double atol = 1e-5;        // an element passes when |analytic − numeric| ≤ atol + rtol·|numeric|
  double rtol = 1e-3;
  bool check_inputs = true;  // also check gradients of real-valued inputs
  std::uint64_t seed = 0;    // for the random cotangents of non-scalar outputs
  int threads = 1;
  int fuse = -1;             // run fused patterns (exec_options::fuse): 1 yes, 0 no, −1 the default
};

/// What gradcheck found. Converts to true when every element passed.
struct gradcheck_result {
  bool ok = true;
  std::int64_t checked = 0;   // number of scalars compared
  std::int64_t failed = 0;    // number outside the tolerance
  // the element furthest outside (or, when all pass, closest to) the tolerance
  std::string worst_name;     // "param \"q.weight\"" or "input \"x\""
  std::vector<std::int64_t> worst_index;
  double analytic = 0, numeric = 0;
  double worst_excess = -1e300;  // |a − n| − (atol + rtol·|n|); > 0 means failure

  explicit operator bool() const { return ok; }
  /// One line: "gradcheck passed: 412 gradients ..." or the worst element on failure.
  std::string str() const;
};

/// Compares the gradient of L = Σ_k ⟨w_k, output_k⟩ with respect to every parameter and every
/// real input against central differences (L(θ + eps) − L(θ − eps)) / 2eps, where w_k = 1 for
/// a one-element output and a seeded random tensor otherwise (a random vector–Jacobian
/// product, as JAX's check_grads). Parameters must already be in `params`.
gradcheck_result gradcheck(const plan_view& plan, param_store<double>& params, std::span<const feed> feeds,
                           gradcheck_options options = {});

/// gradcheck over the graph g (see above).
template <class Graph>
gradcheck_result gradcheck(const Graph& g, param_store<double>& params, std::initializer_list<feed> feeds,
                           gradcheck_options options = {}) {
  return gradcheck(g.plan(), params, std::span<const feed>(feeds.begin(), feeds.size()), options);
}

}  // namespace loom
