// precision_report: how far a graph's float32 run is from the same graph in double, per output
// and per gradient — gradcheck's machinery applied to precision.
//
// The graph runs twice on the same inputs: in double (the reference: parameters and real
// inputs as given) and in float32 (the same values rounded once to float; with
// options.precision = bf16, its GEMM-like work in bf16; with options.weights = int8, its weight
// products with int8 weights, forward only), forward and then
// backward with the same cotangents (1 for a one-element output, seeded uniform(−1, 1)
// otherwise, as gradcheck). Every output and every gradient (each parameter's, each real
// input's) is compared element by element:
//
//   max_abs  = max |float − double|
//   relative = max_abs / max |double|   (the error against the tensor's own scale, so that
//                                        elements near zero do not blow it up)
//   norm_relative = ‖float − double‖₂ / ‖double‖₂   (the whole tensor's error, which one
//                                        element flipped by a ReLU near 0 does not dominate)
//
//   auto r = loom::precision_report(g, params64, {{"x", x64}});
//   std::printf("%s", r.str().c_str());          // one line per output and gradient
//   REQUIRE(r.worst_relative() < 1e-5);
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "loom/core/params.hpp"
#include "loom/graph/executor.hpp"
#include "loom/graph/feed.hpp"
#include "loom/graph/plan.hpp"

namespace loom {

/// Settings of precision_report.
struct precision_options {
  bool gradients = true;    // run backward and compare the gradients too (else outputs only)
  bool inputs = true;       // with gradients: also the gradients of real inputs
  std::uint64_t seed = 0;   // the random cotangents of non-scalar outputs
  int threads = 1;          // both runs' threads (results do not depend on it)
  int fuse = -1;            // run fused patterns (exec_options::fuse): 1 yes, 0 no, −1 the default
  /// The float run's compute precision (exec_options::precision): bf16 measures the mixed-
  /// precision graph against double.
  compute_precision precision = compute_precision::f32;
  /// The float run's weights (exec_options::weights): int8 measures the quantized products
  /// against double. Inference only: needs gradients = false (value_error otherwise).
  weight_precision weights = weight_precision::f32;
};

/// One compared tensor.
struct precision_entry {
  std::string name;                      // "output 0", "output \"scores\"", "grad param \"w\"", "grad input \"x\""
  std::int64_t elements = 0;
  double max_abs = 0;                    // max |float − double|
  double scale = 0;                      // max |double|
  double relative = 0;                   // max_abs / scale (0 when both are 0; +inf for NaN or a nonzero error on a zero tensor)
  double norm_relative = 0;              // ‖float − double‖₂ / ‖double‖₂ (the same conventions)
  std::vector<std::int64_t> worst_index; // where max_abs is
};

/// What precision_report found.
struct precision_result {
  std::vector<precision_entry> entries;  // outputs (in the graph's order), then gradients
  /// The entry named `name`; throws missing_error listing the names when there is none.
  const precision_entry& at(const std::string& name) const;
  /// The largest relative error of all entries (0 when there are none).
  double worst_relative() const;
  /// The largest norm_relative of all entries (0 when there are none).
  double worst_norm_relative() const;
  /// One line per entry: name, elements, max_abs, scale, relative, norm_relative.
  std::string str() const;
};

/// Runs `plan` in double over `params` and `feeds` and in float32 over their rounded copies,
/// and compares every output and gradient (see above). Real-valued feeds must be double
/// (storage f64); int and bool feeds pass to both runs. Throws what the executors throw
/// (shape_error, missing_error, value_error) for bad feeds or parameters.
precision_result precision_report(const plan_view& plan, const param_store<double>& params, std::span<const feed> feeds,
                                  precision_options options = {});

/// precision_report over the graph g (see above).
template <class Graph>
precision_result precision_report(const Graph& g, const param_store<double>& params, std::initializer_list<feed> feeds,
                                  precision_options options = {}) {
  return precision_report(g.plan(), params, std::span<const feed>(feeds.begin(), feeds.size()), options);
}

}  // namespace loom
