// How an op is written as ONNX: the interface an op's declaration uses to state its mapping.
//
// An op that can be exported declares, next to its kernels,
//
//   static std::string to_onnx(loom::onnx_emitter& e);
//
// which adds the ONNX nodes computing the op's value from its inputs' values and returns the
// name of that value. The emitter (implemented by loom::onnx, include/loom/onnx/export.hpp)
// names the inputs' values, adds nodes and constants, and turns dims — fixed or named, bound
// when the exported model runs — into int64 tensors:
//
//   static std::string to_onnx(loom::onnx_emitter& e) {            // softsign(x) = x / (1 + |x|)
//     auto x = e.input(0);
//     return e.add("Div", {x, e.add("Add", {e.real(1), e.add("Abs", {x})})});
//   }
//
// Nothing here depends on ONNX's protobuf classes: an op's mapping compiles with loom's headers
// alone, and a program that never exports never links ONNX. An op without the member cannot be
// exported; loom::onnx::save refuses a graph holding one, at compile time.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/dims.hpp"

namespace loom {

struct node_desc;

/// One attribute of an ONNX node: an integer, a real, a list of integers or a string.
struct onnx_attr {
  enum class kind : unsigned char { integer, real, integers, text };
  std::string name;
  kind k = kind::integer;
  long i = 0;
  double f = 0;
  std::vector<long> ints{};
  std::string s{};

  static onnx_attr integer(std::string name, long v) { return {std::move(name), kind::integer, v}; }
  static onnx_attr real(std::string name, double v) { return {std::move(name), kind::real, 0, v}; }
  static onnx_attr integers(std::string name, std::vector<long> v) {
    return {std::move(name), kind::integers, 0, 0, std::move(v)};
  }
  static onnx_attr text(std::string name, std::string v) { return {std::move(name), kind::text, 0, 0, {}, std::move(v)}; }
};

/// What an op's to_onnx sees: the node being written and a way to add ONNX nodes. Values are
/// named by strings; every method returns the name of the value it made.
class onnx_emitter {
 public:
  /// The node being exported (its op, attributes through load_attrs, dims, inputs).
  virtual const node_desc& node() const = 0;
  /// The value of the node's input i, in the element type the exported graph gives it: the
  /// graph's real type (float or double), int64 for int inputs, bool for bool inputs.
  virtual std::string input(int i) = 0;
  /// Adds the node `op_type`(inputs) of the default ONNX domain (or `domain`) with
  /// `attributes`; returns the name of its (first) output. An empty input name is an omitted
  /// optional input.
  virtual std::string add(std::string_view op_type, std::vector<std::string> inputs,
                          std::vector<onnx_attr> attributes = {}, std::string_view domain = {}) = 0;
  /// A constant of the graph's real type with `values` and shape `shape` (a scalar when empty).
  virtual std::string real(std::span<const double> values, std::vector<long> shape) = 0;
  /// A real scalar constant.
  std::string real(double v) { return real(std::span<const double>(&v, 1), {}); }
  /// An int64 constant with `values` and shape `shape` (a scalar when empty).
  virtual std::string int64(std::vector<long> values, std::vector<long> shape) = 0;
  /// An int64 1-D constant.
  std::string int64s(std::vector<long> values) {
    const long n = static_cast<long>(values.size());
    return int64(std::move(values), {n});
  }
  /// A 1-D int64 tensor of the values of `dims` when the model runs (named dims are read off the
  /// shapes of the graph's inputs, or of the parameters that bind them).
  virtual std::string dims(std::span<const dim_expr> dims) = 0;
  /// One dim's value as an int64 scalar (rank 0), for Range and the like.
  virtual std::string dim_scalar(const dim_expr& d) = 0;
  /// The real type's ONNX element type number (TensorProto.DataType: 1 float, 11 double), for
  /// Cast.
  virtual int real_type() const = 0;
  /// Refuses the node: throws loom::error naming the op and `why`.
  [[noreturn]] virtual void unsupported(std::string_view why) = 0;

 protected:
  ~onnx_emitter() = default;
};

/// An op's mapping: adds the nodes computing its value, returns the value's name.
using onnx_mapping = std::string (*)(onnx_emitter&);

}  // namespace loom
