// Every op loom has, from its registered entry: a gradcheck case in the table below, a name in
// the DOT output, and honest traits (a backward that reads nothing it does not declare). An
// op added without a case here fails this test.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "../graph/executor_access.hpp"  // nodes by plan index
#include "all_op_headers.hpp"  // generated: every header in include/loom/ops/, so every op registers
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

/// What one op's case found.
struct case_result {
  std::set<std::string_view> ops;  // the ops in the case's graph
  std::string dot;
  gradcheck_result grad;
  std::string unread_poisoned;  // which unread values were overwritten with NaN
  bool same_after_poison = false;
};

std::vector<double> all_grads(const executor<double>& ex, const param_store<double>& p) {
  std::vector<double> g;
  for (auto& [name, e] : p) g.insert(g.end(), e.grad.values().begin(), e.grad.values().end());
  const plan_view& plan = ex.plan();
  for (int i = 0; i < plan.size(); ++i)
    if (plan.order[i]->op->role == node_role::input && plan.order[i]->elem == dtype::real) {
      auto v = detail::executor_access::grad_at(ex, i);
      g.insert(g.end(), v.data, v.data + v.dims.size());
    }
  return g;
}

void fill_nan(tensor_view<const double> v) {
  std::fill(const_cast<double*>(v.data), const_cast<double*>(v.data) + v.dims.size(),
            std::numeric_limits<double>::quiet_NaN());
}

// Runs forward + backward (cotangent: seeded random) twice; the second time, before backward,
// every value that the op's entry says its backward does not read is overwritten with NaN
// (when no other node's backward reads it either). The gradients must be the same bits.
void check_unread(const plan_view& plan, const op_entry& op, param_store<double>& params,
                  std::span<const feed> feeds, case_result& r) {
  int target = -1;
  for (int i = 0; i < plan.size(); ++i)
    if (plan.order[i]->op == &op) target = i;
  REQUIRE(target >= 0);
  executor<double> ex(plan, params, {.threads = 1, .input_grads = true, .keep_all = true});
  std::vector<tensor<double>> cot;
  for (std::size_t k = 0; k < plan.roots.size(); ++k) {
    ex.forward(feeds);
    cot.push_back(test::random_tensor<double>(ex.output(static_cast<int>(k)).dims, 40 + k));
  }
  ex.forward(feeds);
  ex.backward(cot);
  const auto before = all_grads(ex, params);

  ex.forward(feeds);
  auto ins = plan.inputs(target);
  for (std::size_t k = 0; k < ins.size(); ++k) {
    const int j = ins[k];
    const node_desc& src = *plan.order[j];
    if (op.backward_reads_input(static_cast<int>(k)) || src.elem != dtype::real) continue;
    bool read_at_another_position = false;  // the same node as an input the backward reads
    for (std::size_t k2 = 0; k2 < ins.size(); ++k2)
      read_at_another_position = read_at_another_position || (ins[k2] == j && op.backward_reads_input(static_cast<int>(k2)));
    if (read_at_another_position) continue;
    if (src.op->role != node_role::input || plan.consumers(j).size() != 1) continue;  // someone else may read it
    fill_nan(detail::executor_access::value_at(ex, j));
    r.unread_poisoned += " input " + std::to_string(k);
  }
  bool output_unread = !op.backward_reads_output;
  for (int c : plan.consumers(target)) {
    auto cins = plan.inputs(c);
    for (std::size_t k = 0; k < cins.size(); ++k)
      if (cins[k] == target && plan.order[c]->op->backward_reads_input(static_cast<int>(k))) output_unread = false;
  }
  if (output_unread && plan.order[target]->elem == dtype::real) {
    fill_nan(detail::executor_access::value_at(ex, target));
    r.unread_poisoned += " output";
  }
  ex.backward(cot);
  const auto after = all_grads(ex, params);
  r.same_after_poison = before.size() == after.size() &&
                        std::memcmp(before.data(), after.data(), before.size() * sizeof(double)) == 0;
}

// The whole check of one case: the graph g (containing `op`) with its parameters and feeds.
// The plan is the one an executor runs: with its fusions, so that fused ops are checked too.
template <class G>
case_result run_case(const G& g, const op_entry& op, std::initializer_list<feed> feeds, std::uint64_t seed = 1) {
  case_result r;
  auto params = g.template make_params<double>(seed);
  test::randomize(params, seed + 1);
  const executor<double> fused(g.plan(), params);
  const plan_view plan = fused.plan();
  for (int i = 0; i < plan.size(); ++i) r.ops.insert(plan.order[i]->op->name);
  r.dot = to_dot(plan);
  const std::vector<feed> fs(feeds);
  r.grad = gradcheck(plan, params, fs);
  check_unread(plan, op, params, fs, r);
  return r;
}

const op_entry& op_named(std::string_view name) {
  for (const op_entry* op : registered_ops())
    if (op->name == name) return *op;
  throw std::runtime_error("no op " + std::string(name));
}

using tokens = tensor<std::int32_t>;
tensor<double> rnd(dims_t d, std::uint64_t seed) { return test::random_tensor<double>(d, seed); }

// One case per op: a small graph that uses it, with inputs that keep finite differences
// meaningful (masks are followed by softmax so that no score is −∞ in the loss).
const std::map<std::string_view, std::function<case_result()>>& cases() {
  static const std::map<std::string_view, std::function<case_result()>> table = {
      {"matmul",
       [] {
         auto a = input<"a", shape<fix<3>, fix<4>>>();
         auto b = input<"b", shape<fix<5>, fix<4>>>();
         return run_case(make_graph(matmul<false, true>(a, b)), entry_of<matmul_def>, {{"a", rnd({3, 4}, 1)}, {"b", rnd({5, 4}, 2)}});
       }},
      {"scale",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(scale<0.25>(x)), entry_of<scale_def>, {{"x", rnd({2, 3}, 3)}});
       }},
      {"mask_causal",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>, fix<4>>>();
         return run_case(make_graph(softmax(mask_causal(x))), entry_of<mask_causal_op>, {{"x", rnd({2, 3, 4}, 4)}});
       }},
      {"mask_padding",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>, fix<4>>>();
         auto len = input<"len", shape<fix<2>>, int>();
         return run_case(make_graph(softmax(mask_padding(x, len))), entry_of<mask_padding_def>,
                         {{"x", rnd({2, 3, 4}, 5)}, {"len", tokens({2}, {4, 2})}});
       }},
      {"mask_bool",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>, fix<4>>>();
         auto m = input<"m", shape<fix<3>, fix<4>>, bool>();
         tensor<std::uint8_t> ms({3, 4}, {1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0});
         return run_case(make_graph(softmax(mask_bool(x, m))), entry_of<mask_bool_def>, {{"x", rnd({2, 3, 4}, 6)}, {"m", ms}});
       }},
      {"softmax",
       [] {
         auto x = input<"x", shape<fix<2>, fix<5>>>();
         return run_case(make_graph(softmax(x)), entry_of<softmax_op>, {{"x", rnd({2, 5}, 7)}});
       }},
      {"concat",
       [] {
         auto a = input<"a", shape<fix<2>, fix<3>>>();
         auto b = input<"b", shape<fix<1>, fix<3>>>();
         return run_case(make_graph(concat<0>(a, b)), entry_of<concat_def>, {{"a", rnd({2, 3}, 8)}, {"b", rnd({1, 3}, 9)}});
       }},
      {"slice",
       [] {
         auto x = input<"x", shape<fix<2>, fix<4>>>();
         return run_case(make_graph(slice<1, fix<1>, fix<2>>(x)), entry_of<slice_def>, {{"x", rnd({2, 4}, 10)}});
       }},
      {"reshape",
       [] {
         auto x = input<"x", shape<fix<2>, fix<6>>>();
         return run_case(make_graph(reshape<shape<fix<3>, fix<4>>>(x)), entry_of<reshape_def>, {{"x", rnd({2, 6}, 11)}});
       }},
      {"transpose",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>, fix<4>>>();
         return run_case(make_graph(transpose<1, 0, 2>(x)), entry_of<transpose_def>, {{"x", rnd({2, 3, 4}, 12)}});
       }},
      {"add",  // both operands broadcast
       [] {
         auto a = input<"a", shape<fix<2>, fix<1>, fix<3>>>();
         auto b = input<"b", shape<fix<4>, fix<1>>>();
         return run_case(make_graph(add(a, b)), entry_of<add_op>, {{"a", rnd({2, 1, 3}, 13)}, {"b", rnd({4, 1}, 14)}});
       }},
      {"sum",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(sum(x)), entry_of<sum_op>, {{"x", rnd({2, 3}, 15)}});
       }},
      {"mul",  // both operands broadcast
       [] {
         auto a = input<"a", shape<fix<2>, fix<1>, fix<3>>>();
         auto b = input<"b", shape<fix<4>, fix<1>>>();
         return run_case(make_graph(mul(a, b)), entry_of<mul_op>, {{"a", rnd({2, 1, 3}, 16)}, {"b", rnd({4, 1}, 17)}});
       }},
      {"embedding",
       [] {
         auto tok = input<"tok", shape<fix<2>, fix<3>>, int>();
         auto w = param<"w", shape<fix<5>, fix<2>>>();
         return run_case(make_graph(embedding(tok, w)), entry_of<embedding_op>, {{"tok", tokens({2, 3}, {4, 0, 4, 1, 2, 3})}});
       }},
      {"positional_encoding",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>, fix<4>>>();
         auto pos = input<"pos", shape<fix<2>, fix<3>>, int>();
         return run_case(make_graph(add_positional_encoding(x, pos)), entry_of<positional_encoding_def>,
                         {{"x", rnd({2, 3, 4}, 18)}, {"pos", tokens({2, 3}, {0, 1, 2, 5, 6, 7})}});
       }},
      {"layer_norm",
       [] {
         auto x = input<"x", shape<fix<3>, fix<4>>>();
         auto gamma = param<"gamma", shape<fix<4>>, init<init_kind::ones>>();
         auto beta = param<"beta", shape<fix<4>>>();
         return run_case(make_graph(layer_norm<1e-5>(x, gamma, beta)), entry_of<layer_norm_def>, {{"x", rnd({3, 4}, 19)}});
       }},
      {"rms_norm",
       [] {
         auto x = input<"x", shape<fix<3>, fix<4>>>();
         auto w = param<"w", shape<fix<4>>, init<init_kind::ones>>();
         return run_case(make_graph(rms_norm<1e-6>(x, w)), entry_of<rms_norm_def>, {{"x", rnd({3, 4}, 61)}});
       }},
      {"rope",  // positions [B, T] shared by the heads, offsets past 0
       [] {
         auto x = input<"x", shape<fix<2>, fix<2>, fix<3>, fix<4>>>();
         auto pos = input<"pos", shape<fix<2>, fix<3>>, int>();
         return run_case(make_graph(rope<rope_layout::rotate_half>(x, pos)), entry_of<rope_def>,
                         {{"x", rnd({2, 2, 3, 4}, 62)}, {"pos", tokens({2, 3}, {0, 1, 2, 5, 6, 7})}});
       }},
      {"relu",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(relu(x)), entry_of<relu_op>, {{"x", tensor<double>({2, 3}, {0.5, -1, 2, 1, 1.5, -0.5})}});
       }},
      {"gelu",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(gelu(x)), entry_of<gelu_op>, {{"x", rnd({2, 3}, 20)}});
       }},
      {"gelu_tanh",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(gelu_tanh(x)), entry_of<gelu_tanh_op>, {{"x", rnd({2, 3}, 63)}});
       }},
      {"checkpoint",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         auto y = scale<2.0>(x);
         return run_case(make_graph(checkpoint(mul(y, y), x)), entry_of<checkpoint_op>, {{"x", rnd({2, 3}, 24)}});
       }},
      {"named",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         auto y = scale<2.0>(x);  // two consumers: the named view gets a gradient buffer of its own
         return run_case(make_graph(mul(named<"y">(y), y)), entry_of<named_def>, {{"x", rnd({2, 3}, 25)}});
       }},
      {"attention",  // fused by the plan rewrite from matmul → scale → masks → softmax → matmul;
                     // here grouped queries (4 heads over 2 key/value heads) and a float mask
                     // whose gradient the fused backward gives
       [] {
         auto q = input<"q", shape<fix<2>, fix<4>, fix<3>, fix<4>>>();
         auto k = input<"k", shape<fix<2>, fix<2>, fix<5>, fix<4>>>();
         auto v = input<"v", shape<fix<2>, fix<2>, fix<5>, fix<3>>>();
         auto len = input<"len", shape<fix<2>>, int>();
         auto f = input<"f", shape<fix<2>, fix<1>, fix<3>, fix<5>>>();
         return run_case(make_graph(nn::attention<{.enable_gqa = true}>(q, k, v, nn::causal, nn::padding(len),
                                                                         nn::additive(f))),
                         op_named("attention"),
                         {{"q", rnd({2, 4, 3, 4}, 26)}, {"k", rnd({2, 2, 5, 4}, 27)}, {"v", rnd({2, 2, 5, 3}, 28)},
                          {"len", tokens({2}, {5, 4})}, {"f", rnd({2, 1, 3, 5}, 29)}});
       }},
      {"linear",  // fused by the plan rewrite from add(matmul(x, wᵀ), b)
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>, fix<4>>>();
         return run_case(make_graph(nn::linear<"l", 5>(x)), op_named("linear"), {{"x", rnd({2, 3, 4}, 29)}});
       }},
      {"linear_relu",
       [] {
         auto x = input<"x", shape<fix<3>, fix<4>>>();
         return run_case(make_graph(relu(nn::linear<"l", 5>(x))), op_named("linear_relu"), {{"x", rnd({3, 4}, 30)}});
       }},
      {"linear_gelu",
       [] {
         auto x = input<"x", shape<fix<3>, fix<4>>>();
         return run_case(make_graph(gelu(nn::linear<"l", 5>(x))), op_named("linear_gelu"), {{"x", rnd({3, 4}, 31)}});
       }},
      {"linear_residual",  // fused by the plan rewrite from add(r, add(matmul(x, wᵀ), b)); the
                           // residual's own input as r: tests/test_fusion.cpp
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>, fix<4>>>();
         auto r = input<"r", shape<fix<2>, fix<3>, fix<5>>>();
         return run_case(make_graph(r + nn::linear<"l", 5>(x)), op_named("linear_residual"),
                         {{"x", rnd({2, 3, 4}, 32)}, {"r", rnd({2, 3, 5}, 33)}});
       }},
      {"silu",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(silu(x)), entry_of<silu_op>, {{"x", rnd({2, 3}, 23)}});
       }},
      {"dropout",
       [] {
         auto x = input<"x", shape<fix<4>, fix<5>>>();
         auto seed = input<"seed", shape<fix<2>>, int>();
         return run_case(make_graph(dropout<0.3>(x, seed)), entry_of<dropout_def>,
                         {{"x", rnd({4, 5}, 21)}, {"seed", tokens({2}, {7, 1})}});
       }},
      // unary math (unary.hpp): log, sqrt and rsqrt on positive inputs; abs away from its kink
      {"neg",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(neg(x)), entry_of<neg_op>, {{"x", rnd({2, 3}, 40)}});
       }},
      {"exp",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(loom::exp(x)), entry_of<exp_op>, {{"x", rnd({2, 3}, 41)}});
       }},
      {"log",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(loom::log(x)), entry_of<log_op>, {{"x", test::random_tensor<double>({2, 3}, 42, 0.5, 2)}});
       }},
      {"sqrt",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(loom::sqrt(x)), entry_of<sqrt_op>, {{"x", test::random_tensor<double>({2, 3}, 43, 0.5, 2)}});
       }},
      {"rsqrt",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(rsqrt(x)), entry_of<rsqrt_op>, {{"x", test::random_tensor<double>({2, 3}, 44, 0.5, 2)}});
       }},
      {"tanh",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(loom::tanh(x)), entry_of<tanh_op>, {{"x", rnd({2, 3}, 45)}});
       }},
      {"sigmoid",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(sigmoid(x)), entry_of<sigmoid_op>, {{"x", rnd({2, 3}, 46)}});
       }},
      {"abs",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(loom::abs(x)), entry_of<abs_op>, {{"x", tensor<double>({2, 3}, {0.5, -1, 2, 1, 1.5, -0.5})}});
       }},
      {"square",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>>>();
         return run_case(make_graph(square(x)), entry_of<square_op>, {{"x", rnd({2, 3}, 47)}});
       }},
      // binary math (binary.hpp, where.hpp), both operands broadcast
      {"sub",
       [] {
         auto a = input<"a", shape<fix<2>, fix<1>, fix<3>>>();
         auto b = input<"b", shape<fix<4>, fix<1>>>();
         return run_case(make_graph(a - b), entry_of<sub_op>, {{"a", rnd({2, 1, 3}, 48)}, {"b", rnd({4, 1}, 49)}});
       }},
      {"div",  // denominators away from 0
       [] {
         auto a = input<"a", shape<fix<2>, fix<1>, fix<3>>>();
         auto b = input<"b", shape<fix<4>, fix<1>>>();
         return run_case(make_graph(a / b), entry_of<div_op>,
                         {{"a", rnd({2, 1, 3}, 50)}, {"b", test::random_tensor<double>({4, 1}, 51, 0.5, 2)}});
       }},
      {"maximum",  // no ties (finite differences across a kink would be meaningless)
       [] {
         auto a = input<"a", shape<fix<2>, fix<1>, fix<3>>>();
         auto b = input<"b", shape<fix<4>, fix<1>>>();
         return run_case(make_graph(maximum(a, b)), entry_of<maximum_op>, {{"a", rnd({2, 1, 3}, 52)}, {"b", rnd({4, 1}, 53)}});
       }},
      {"minimum",
       [] {
         auto a = input<"a", shape<fix<2>, fix<1>, fix<3>>>();
         auto b = input<"b", shape<fix<4>, fix<1>>>();
         return run_case(make_graph(minimum(a, b)), entry_of<minimum_op>, {{"a", rnd({2, 1, 3}, 54)}, {"b", rnd({4, 1}, 55)}});
       }},
      {"where",  // cond [3, 1], a [2, 3, 4], b [4]: all three broadcast
       [] {
         auto c = input<"c", shape<fix<3>, fix<1>>, bool>();
         auto a = input<"a", shape<fix<2>, fix<3>, fix<4>>>();
         auto b = input<"b", shape<fix<4>>>();
         return run_case(make_graph(where(c, a, b)), entry_of<where_op>,
                         {{"c", tensor<std::uint8_t>({3, 1}, {1, 0, 1})}, {"a", rnd({2, 3, 4}, 56)}, {"b", rnd({4}, 57)}});
       }},
      // reductions over one axis (reduction.hpp)
      {"reduce_sum",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>, fix<4>>>();
         return run_case(make_graph(reduce_sum<1>(x)), entry_of<reduce_sum_def>, {{"x", rnd({2, 3, 4}, 58)}});
       }},
      {"mean",
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>, fix<4>>>();
         return run_case(make_graph(mean<-1, true>(x)), entry_of<mean_def>, {{"x", rnd({2, 3, 4}, 59)}});
       }},
      {"amax",  // no ties
       [] {
         auto x = input<"x", shape<fix<3>, fix<4>>>();
         return run_case(make_graph(amax<0>(x)), entry_of<amax_def>, {{"x", rnd({3, 4}, 60)}});
       }},
      {"cross_entropy",
       [] {
         auto x = input<"x", shape<fix<3>, fix<5>>>();
         auto t = input<"t", shape<fix<3>>, int>();
         return run_case(make_graph(cross_entropy<-100, 0.1>(x, t)), entry_of<cross_entropy_def>,
                         {{"x", rnd({3, 5}, 22)}, {"t", tokens({3}, {4, -100, 0})}});
       }},
      {"linear_cross_entropy",  // fused by the plan rewrite from cross_entropy(add(matmul(x, wᵀ), b), t);
                                // without a bias and in several row chunks: tests/test_fused_cross_entropy.cpp
       [] {
         auto x = input<"x", shape<fix<2>, fix<3>, fix<4>>>();
         auto t = input<"t", shape<fix<2>, fix<3>>, int>();
         return run_case(make_graph(cross_entropy<-100, 0.1>(nn::linear<"l", 5>(x), t)), op_named("linear_cross_entropy"),
                         {{"x", rnd({2, 3, 4}, 34)}, {"t", tokens({2, 3}, {4, -100, 0, 1, 2, 3})}});
       }},
  };
  return table;
}

}  // namespace

TEST_CASE("every op has a gradcheck case, a DOT name, and a backward that reads only what its entry declares") {
  REQUIRE(registered_ops().size() >= cases().size());
  for (const op_entry* op : registered_ops()) {
    INFO("op \"" << op->name << "\"");
    auto it = cases().find(op->name);
    if (it == cases().end()) {
      FAIL_CHECK("no case for this op in tests/test_op_table.cpp: add one");
      continue;
    }
    const case_result r = it->second();
    CHECK(r.ops.count(op->name) == 1);  // the case really uses the op
    CHECK_THAT(r.dot, Catch::Contains("[label=\"" + std::string(op->name) + "\\n"));
    INFO(r.grad.str());
    CHECK(r.grad.checked > 0);
    CHECK(r.grad.ok);
    INFO("overwritten with NaN before backward:" << r.unread_poisoned);
    CHECK(r.same_after_poison);
  }
}

TEST_CASE("every op a user writes has an ONNX mapping (the fused ones are exported as the ops they were made from)") {
  for (const op_entry* op : registered_ops()) {
    INFO(op->name);
    CHECK((op->to_onnx != nullptr) == !op->fused);
  }
}

TEST_CASE("every case in the table names a registered op") {
  std::set<std::string_view> names;
  for (const op_entry* op : registered_ops()) names.insert(op->name);
  for (const auto& [name, run] : cases()) {
    INFO(name);
    CHECK(names.count(name) == 1);
  }
}

TEST_CASE("op names and ids are unique, and no op reuses the leaves' ids") {
  std::set<std::string_view> names{input_entry.name, param_entry.name};
  std::set<std::uint64_t> ids{input_entry.id, param_entry.id};
  for (const op_entry* op : registered_ops()) {
    INFO(op->name);
    CHECK(names.insert(op->name).second);
    CHECK(ids.insert(op->id).second);
    CHECK(op->role == node_role::op);
    CHECK(op->f32.forward);
    CHECK(op->f32.backward);
    CHECK(op->f64.forward);
    CHECK(op->f64.backward);
  }
}

TEST_CASE("a view's backward reads nothing, and an op that runs in place declares no strided reads") {
  for (const op_entry* op : registered_ops()) {
    INFO(op->name);
    if (op->is_view) CHECK((op->backward_reads == 0 && !op->backward_reads_output));
    if (op->can_run_in_place) CHECK(op->reads_strided == nullptr);
  }
}
