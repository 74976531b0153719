// expect: loom::onnx::save: an op of this graph has no ONNX mapping
// max-bytes: 4000
#include "loom/loom.hpp"
#include "loom/onnx/export.hpp"
using namespace loom;
// an op of a user's own, declared without to_onnx: its graph cannot be exported
struct twice_op : pointwise<twice_op, pointwise_reads::none> {
  static constexpr std::string_view name = "test.twice";
  template <class T> static T f(T x) { return 2 * x; }
  template <class T> static T df(T, T) { return T(2); }
};
void bad(const param_store<float>& params) {
  auto x = input<"x", shape<fix<3>>>();
  onnx::save(make_graph(op_fn<twice_op>{}(x)), params, "twice.onnx");
}
