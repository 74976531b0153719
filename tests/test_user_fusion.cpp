// Fusion rules a project adds (loom/graph/fusion.hpp): a pattern of primitives replaced by a
// fused op the project declares, applied by the same plan rewrite as the library's own rules,
// with the unfused graph as the reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "loom/graph/fusion.hpp"
#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

// The fused op: y = c · relu(x), c the scale the rule found.  backward: dx (+)= dy · c · [x > 0]
struct scaled_relu_params {
  double factor = 1;
};
struct scaled_relu_op : op_def<scaled_relu_op> {
  static constexpr std::string_view name = "test_scaled_relu";
  static constexpr op_traits traits{.backward_reads = reads({0}), .fused = true};
  template <class T>
  static void forward(const op_args<T>& a) {
    const T c = static_cast<T>(static_cast<const scaled_relu_params*>(a.fused)->factor);
    const T* x = a.input(0);
    for (std::int64_t i = 0; i < a.out_dims.size(); ++i) a.out[i] = c * std::max(x[i], T(0));
  }
  template <class T>
  static void backward(const op_args<T>& a) {
    T* dx = a.grad(0);
    if (!dx) return;
    const T c = static_cast<T>(static_cast<const scaled_relu_params*>(a.fused)->factor);
    const T* x = a.input(0);
    for (std::int64_t i = 0; i < a.out_dims.size(); ++i) dx[i] += x[i] > 0 ? c * a.dout[i] : T(0);
  }
};

// The rule: scale<c>(relu(x)), the relu read by the scale only.
std::optional<fusion> scaled_relu_rule(const plan_view& p, int root, std::span<const std::uint8_t> absorbable) {
  if (p.order[root]->op != &entry_of<scale_def>) return std::nullopt;
  const int r = p.inputs(root)[0];
  if (p.order[r]->op != &entry_of<relu_op> || !only_for(p, absorbable, r, root)) return std::nullopt;
  fusion f;
  f.op = &entry_of<scaled_relu_op>;
  f.root = root;
  f.inputs = {p.inputs(r)[0]};
  f.absorbed = {r};
  f.params = std::make_shared<scaled_relu_params>(scaled_relu_params{load_attrs<scale_attrs>(*p.order[root]).factor});
  return f;
}

const bool rule_added = [] {
  add_fusion_rule({.name = "test_scaled_relu", .match = &scaled_relu_rule});
  return true;
}();

std::vector<std::string_view> op_names(const plan_view& plan) {
  std::vector<std::string_view> ops;
  for (int i = 0; i < plan.size(); ++i) ops.push_back(plan.order[i]->op->name);
  return ops;
}

bool has(const std::vector<std::string_view>& ops, std::string_view name) {
  return std::find(ops.begin(), ops.end(), name) != ops.end();
}

}  // namespace

TEST_CASE("a project's fusion rule replaces its pattern, gives the unfused values and gradients, and passes gradcheck") {
  REQUIRE(rule_added);
  auto x = input<"x", shape<dyn<"T">, fix<3>>>();
  auto w = param<"w", shape<fix<3>, fix<3>>, init<init_kind::linear_weight>>();
  auto g = make_graph(sum(mul(scale<-1.5>(relu(matmul<false, true>(x, w))), x)));
  auto params = g.make_params<double>(3);
  const tensor<double> xs({4, 3}, {0.5, -1, 2, 1, 1.5, -0.5, -0.3, 0.2, 0.9, 1.1, -2, 0.4});

  auto fused = g.executor<double>(params, {.input_grads = true});
  CHECK(has(op_names(fused.plan()), "test_scaled_relu"));
  CHECK_FALSE(has(op_names(fused.plan()), "relu"));
  fused.forward({{"x", xs}});
  const double y_fused = fused.output()[0];
  fused.backward();
  const tensor<double> dw_fused = params.grad("w");
  auto dx = fused.input_grad("x");
  const std::vector<double> dx_fused(dx.data, dx.data + dx.size());

  auto plain = g.executor<double>(params, {.input_grads = true, .fuse = false});
  CHECK(has(op_names(plain.plan()), "relu"));
  CHECK_FALSE(has(op_names(plain.plan()), "test_scaled_relu"));
  plain.forward({{"x", xs}});
  CHECK(plain.output()[0] == Approx(y_fused).epsilon(1e-12));
  plain.backward();
  for (std::size_t i = 0; i < dw_fused.values().size(); ++i)
    CHECK(params.grad("w").values()[i] == Approx(dw_fused.values()[i]).epsilon(1e-12).margin(1e-15));
  auto dx2 = plain.input_grad("x");
  for (std::size_t i = 0; i < dx_fused.size(); ++i) CHECK(dx2.data[i] == Approx(dx_fused[i]).epsilon(1e-12).margin(1e-15));

  const std::vector<feed> feeds{{"x", xs}};
  const gradcheck_result r = gradcheck(fused.plan(), params, feeds);
  INFO(r.str());
  CHECK(r.checked > 0);
  CHECK(r.ok);
}

TEST_CASE("a project's rule does not absorb a node that something else reads") {
  auto x = input<"x", shape<fix<2>, fix<2>>>();
  auto r = relu(x);
  auto g = make_graph(sum(add(scale<2.0>(r), r)));  // relu read by scale and by add
  auto params = g.make_params<double>(1);
  auto ex = g.executor<double>(params);
  CHECK(has(op_names(ex.plan()), "relu"));
  CHECK_FALSE(has(op_names(ex.plan()), "test_scaled_relu"));
}

TEST_CASE("fusion rules are tried in priority order, the library's among them, and a rule's name is unique") {
  const std::vector<fusion_rule> rules = fusion_rules();
  auto at = [&](std::string_view name) {
    return std::find_if(rules.begin(), rules.end(), [&](const fusion_rule& f) { return f.name == name; }) - rules.begin();
  };
  REQUIRE(at("attention") < static_cast<long>(rules.size()));
  REQUIRE(at("linear") < static_cast<long>(rules.size()));
  REQUIRE(at("test_scaled_relu") < static_cast<long>(rules.size()));
  CHECK(at("test_scaled_relu") < at("attention"));  // priority 0 before the library's 100
  CHECK(at("attention") < at("linear"));
  CHECK_THROWS_WITH(add_fusion_rule({.name = "test_scaled_relu", .match = &scaled_relu_rule}),
                    Catch::Contains("a rule named \"test_scaled_relu\" exists already"));
  CHECK_THROWS_WITH(add_fusion_rule({.name = "no_match"}), Catch::Contains("has no match function"));
  CHECK(fusion_rules().size() == rules.size());  // nothing was added by the refused calls
}
