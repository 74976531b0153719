// The run-time half of the ONNX node test suite: TensorProto files read with ONNX's protobuf
// classes, turned into loom tensors and feeds, and loom's outputs compared with the expected
// ones at ONNX's tolerance (onnx_node_support.hpp).
#include "onnx_node_support.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace onnx_node {

namespace {

namespace fs = std::filesystem;

onnx::TensorProto read_tensor(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  onnx::TensorProto t;
  if (!t.ParseFromIstream(&in)) throw std::runtime_error(path.string() + " is not a TensorProto");
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    throw std::runtime_error(path.string() + " keeps its data in another file");
  return t;
}

std::string type_name(int type) {
  return onnx::TensorProto_DataType_IsValid(type)
             ? onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(type))
             : "type " + std::to_string(type);
}

loom::dims_t dims_of(const onnx::TensorProto& t) {
  std::vector<std::int64_t> d(t.dims().begin(), t.dims().end());
  return loom::dims_t(std::span<const std::int64_t>(d.data(), d.size()));
}

/// The elements of t, stored as `Stored` in raw_data or in the typed field `field`, as T.
template <class T, class Stored, class Field>
std::vector<T> elements(const onnx::TensorProto& t, const Field& field) {
  const auto n = static_cast<std::size_t>(dims_of(t).size());
  std::vector<T> out;
  out.reserve(n);
  if (!t.raw_data().empty()) {
    if (t.raw_data().size() != n * sizeof(Stored))
      throw std::runtime_error("a tensor of " + std::to_string(n) + " elements holds " +
                               std::to_string(t.raw_data().size()) + " bytes of raw data");
    for (std::size_t i = 0; i < n; ++i) {
      Stored v;
      std::memcpy(&v, t.raw_data().data() + i * sizeof(Stored), sizeof(Stored));  // little-endian, as ONNX's files
      out.push_back(static_cast<T>(v));
    }
  } else {
    if (static_cast<std::size_t>(field.size()) != n)
      throw std::runtime_error("a tensor of " + std::to_string(n) + " elements holds " + std::to_string(field.size()) +
                               " values");
    for (auto v : field) out.push_back(static_cast<T>(v));
  }
  return out;
}

std::vector<float> floats_of(const onnx::TensorProto& t) {
  if (t.data_type() != onnx::TensorProto::FLOAT)
    throw std::runtime_error("expected a FLOAT tensor, found " + type_name(t.data_type()));
  return elements<float, float>(t, t.float_data());
}

std::vector<std::int64_t> ints_of(const onnx::TensorProto& t) {
  if (t.data_type() == onnx::TensorProto::INT64) return elements<std::int64_t, std::int64_t>(t, t.int64_data());
  if (t.data_type() == onnx::TensorProto::INT32) return elements<std::int64_t, std::int32_t>(t, t.int32_data());
  if (t.data_type() == onnx::TensorProto::BOOL) return elements<std::int64_t, std::uint8_t>(t, t.int32_data());
  throw std::runtime_error("expected an INT64, INT32 or BOOL tensor, found " + type_name(t.data_type()));
}

std::vector<std::uint8_t> bools_of(const onnx::TensorProto& t) {
  if (t.data_type() != onnx::TensorProto::BOOL)
    throw std::runtime_error("expected a BOOL tensor, found " + type_name(t.data_type()));
  auto v = elements<std::uint8_t, std::uint8_t>(t, t.int32_data());
  for (auto& b : v) b = b != 0;
  return v;
}

loom::feed feed_of(const fed_input& in, const onnx::TensorProto& t) {
  const loom::dims_t dims = dims_of(t);
  switch (in.kind) {
    case feed_kind::real: return loom::feed(in.name, loom::tensor<float>(dims, floats_of(t)));
    case feed_kind::index: return loom::feed(in.name, loom::tensor<std::int64_t>(dims, ints_of(t)));  // converted to int32
    case feed_kind::boolean: return loom::feed(in.name, loom::tensor<std::uint8_t>(dims, bools_of(t)));
  }
  throw std::logic_error("feed_of: unknown kind");
}

std::string list(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string number(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

bool close(double got, double want, double rtol, double atol) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (std::isinf(got) || std::isinf(want)) return got == want;
  return std::abs(got - want) <= atol + rtol * std::abs(want);
}

/// Compares output k of one data set, updating r (the first failure's detail is kept).
void compare(loom::tensor_view<const float> got, const onnx::TensorProto& want_proto, int k, case_result& r) {
  const loom::dims_t want_dims = dims_of(want_proto);
  if (!(got.dims == want_dims)) {
    r.passed = false;
    r.within_tight = false;
    if (r.detail.empty())
      r.detail = "output " + std::to_string(k) + " has shape " + got.dims.str() + ", expected " + want_dims.str();
    return;
  }
  const std::vector<float> want = floats_of(want_proto);
  double worst_excess = 0;  // the element furthest outside the tolerance, relative to it
  std::string worst;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.data[i], w = want[i];
    const bool both_nan = std::isnan(g) && std::isnan(w);
    const double err = both_nan || (std::isinf(g) && g == w) ? 0.0 : std::abs(g - w);
    if (std::isnan(err)) r.max_abs_err = std::numeric_limits<double>::quiet_NaN();
    else if (!std::isnan(r.max_abs_err)) r.max_abs_err = std::max(r.max_abs_err, err);
    if (!close(g, w, tight_rtol, tight_atol)) r.within_tight = false;
    if (!close(g, w, onnx_rtol, onnx_atol)) {
      r.passed = false;
      const double excess = std::isfinite(err) ? err / (onnx_atol + onnx_rtol * std::abs(w)) : 1e300;
      if (worst.empty() || excess > worst_excess) {
        worst_excess = excess;
        std::string at;
        for (std::int64_t a : want_dims.index_of(static_cast<std::int64_t>(i))) at += (at.empty() ? "" : ", ") + std::to_string(a);
        worst = "output " + std::to_string(k) + " at [" + at + "]: got " + number(g) + ", expected " + number(w);
      }
    }
  }
  if (!worst.empty() && r.detail.empty()) r.detail = worst;
}

std::vector<fs::path> data_sets(const fs::path& case_dir) {
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(case_dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  return sets;
}

int count_files(const fs::path& dir, const std::string& prefix) {
  int n = 0;
  while (fs::exists(dir / (prefix + std::to_string(n) + ".pb"))) ++n;
  return n;
}

}  // namespace

case_result run_case(const case_spec& spec, const fs::path& case_dir) {
  case_result r;
  if (!spec.generator_error.empty()) {
    r.detail = "generate_cases.py could not read it: " + spec.generator_error;
    return r;
  }
  r.passed = true;
  r.within_tight = true;
  try {
    const auto sets = data_sets(case_dir);
    if (sets.empty()) throw std::runtime_error("no test_data_set_* folder in " + case_dir.string());
    loom::param_store<float> store;
    loom::executor<float> run = spec.build(store);
    for (const auto& set : sets) {
      const std::string where = sets.size() > 1 ? set.filename().string() + ": " : "";
      for (const auto& t : spec.typed) {
        const auto values = ints_of(read_tensor(set / ("input_" + std::to_string(t.index) + ".pb")));
        if (values != t.values) {
          r.passed = r.within_tight = r.compared = false;
          r.detail = where + "input " + std::to_string(t.index) + " holds " + list(values) +
                     ", the loom graph was generated for " + list(t.values);
          return r;
        }
      }
      std::vector<loom::feed> feeds;
      for (const auto& in : spec.fed)
        feeds.push_back(feed_of(in, read_tensor(set / ("input_" + std::to_string(in.index) + ".pb"))));
      for (const auto& e : spec.extra)
        feeds.emplace_back(e.name, loom::tensor<std::int64_t>(loom::dims_t(std::span<const std::int64_t>(e.dims)), e.values));
      const int outputs = count_files(set, "output_");
      if (outputs != spec.outputs)
        throw std::runtime_error(set.string() + " has " + std::to_string(outputs) + " outputs, the graph " +
                                 std::to_string(spec.outputs));
      run.forward(feeds);
      r.compared = true;
      for (int k = 0; k < spec.outputs; ++k) {
        case_result one;
        one.passed = one.within_tight = true;
        compare(run.output(k), read_tensor(set / ("output_" + std::to_string(k) + ".pb")), k, one);
        r.passed = r.passed && one.passed;
        r.within_tight = r.within_tight && one.within_tight;
        if (std::isnan(one.max_abs_err) || std::isnan(r.max_abs_err)) r.max_abs_err = std::numeric_limits<double>::quiet_NaN();
        else r.max_abs_err = std::max(r.max_abs_err, one.max_abs_err);
        if (r.detail.empty() && !one.detail.empty()) r.detail = where + one.detail;
      }
    }
  } catch (const std::exception& e) {
    r.passed = r.within_tight = r.compared = false;
    r.detail = std::string("threw: ") + e.what();
  }
  return r;
}

}  // namespace onnx_node
