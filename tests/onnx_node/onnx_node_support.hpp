// The ONNX backend node tests run against loom: what a generated case is (its loom graph, how
// each of the ONNX graph's inputs reaches it) and the run-time half of the suite — reading the
// cases' TensorProto files, feeding them, and comparing loom's outputs with the expected ones.
//
// generate_cases.py writes, for every case of the ONNX test data, a case_spec: either the
// reason it is not applicable to loom, or a function building the loom graph with the case's
// exact fixed shapes. The values of the .pb files are read here, when the suite runs; only the
// inputs that loom takes as types (axes, target shapes, slice bounds: attributes in loom) were
// read by the generator, and the suite checks that each data set still holds those values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/loom.hpp"

namespace onnx_node {

/// How an ONNX graph input is fed to its loom input.
enum class feed_kind : std::uint8_t {
  real,     // FLOAT → loom::real
  index,    // INT64 or INT32 → an int input (loom holds ids as int32)
  boolean,  // BOOL → a bool (uint8) input
};

/// ONNX graph input `index` (input_<index>.pb), fed to the loom input `name`.
struct fed_input {
  int index = 0;
  std::string name;
  feed_kind kind = feed_kind::real;
};

/// ONNX graph input `index`, whose values are part of the loom graph's type (a Reshape's target
/// shape, a ReduceSum's axes): every data set must hold exactly these values (integers; bools as 0, 1).
struct typed_input {
  int index = 0;
  std::vector<std::int64_t> values;
};

/// An int input of the loom graph that the ONNX graph does not have (dropout's seed), fed
/// these values.
struct extra_index_feed {
  std::string name;
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> values;
};

/// Builds the case's graph and returns its executor over `store` (where the graph's constants
/// are set as parameters).
using build_fn = loom::executor<float> (*)(loom::param_store<float>& store);

/// One ONNX node test case as the generator saw it.
struct case_spec {
  std::string name;            // the case's folder name, "test_add_bcast"
  std::string not_applicable;  // why loom cannot run it; empty when it can
  std::string generator_error; // why generate_cases.py could not read the case (it then fails)
  build_fn build = nullptr;
  std::vector<fed_input> fed;
  std::vector<typed_input> typed;
  std::vector<extra_index_feed> extra;
  int outputs = 0;             // the ONNX graph's outputs, loom's outputs 0 .. outputs − 1
  std::string documented;      // a documented difference: the reason a failure is expected
};

/// Every case, sorted by name (generated: the cases_index.cpp of the build folder).
std::vector<case_spec> all_cases();

/// ONNX's own runner's tolerance for node tests (onnx/backend/test/case/node: rtol 1e-3,
/// atol 1e-7, through numpy.testing.assert_allclose): |got − expected| ≤ atol + rtol·|expected|,
/// NaN equal to NaN, equal infinities equal.
inline constexpr double onnx_rtol = 1e-3;
inline constexpr double onnx_atol = 1e-7;
/// A tighter tolerance reported alongside (float rounding of a few operations).
inline constexpr double tight_rtol = 1e-5;
inline constexpr double tight_atol = 1e-6;

/// The outcome of one applicable case.
struct case_result {
  bool passed = false;
  bool within_tight = false;  // every element also within tight_rtol, tight_atol
  bool compared = false;      // loom ran and its outputs were compared (else detail says why not)
  double max_abs_err = 0;     // over every output and data set (NaN when one side is NaN)
  std::string detail;         // why it failed: the worst element, a shape, an exception
};

/// Runs `spec` on every test_data_set_* folder of `case_dir`.
case_result run_case(const case_spec& spec, const std::filesystem::path& case_dir);

}  // namespace onnx_node
