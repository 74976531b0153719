// Attention as a graph: the worked example, and gradcheck of multi-head attention in every
// case the design lists (no mask, causal, padding, cross with S != T, one decode row,
// heads 1/2/4, batch > 1), plus a corrupted backward that gradcheck must catch.
#include <catch2/catch.hpp>

#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "support/corruption.hpp"
#include "test_support.hpp"
#include "worked_attention.hpp"

using namespace loom;

TEST_CASE("the worked self-attention example gives the tutorial's output to 1e-4") {
  auto g = worked::graph();
  auto p = worked::weights_values<float>();
  auto run = g.executor<float>(p);
  run.keep(worked::q());
  run.keep(worked::weights());
  auto x = worked::x_values<float>();
  run.forward({{"x", x}});
  const float expected[6] = {0.4743f, 0.5875f, 0.4736f, 0.5875f, 0.4739f, 0.5877f};
  for (int i = 0; i < 6; ++i) CHECK(std::abs(run.output()[i] - expected[i]) <= 1e-4f);
  // the intermediate values the tutorial prints
  const float q[6] = {0.60f, 0.47f, 0.40f, 0.54f, 0.56f, 0.65f};
  const float w0[3] = {0.3168f, 0.3370f, 0.3462f};
  for (int i = 0; i < 6; ++i) CHECK(std::abs(run.value(worked::q())[i] - q[i]) <= 1e-5f);
  for (int j = 0; j < 3; ++j) CHECK(std::abs(run.value(worked::weights())[j] - w0[j]) <= 1e-4f);
}

TEST_CASE("the worked example passes gradcheck") {
  auto p = worked::weights_values<double>();
  auto x = worked::x_values<double>();
  test::require_gradcheck(worked::graph(), p, {{"x", x}});
}

namespace {
constexpr long D = 8;
using X = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>;
using Mem = input_node<"mem", shape<dyn<"B">, dyn<"S">, fix<D>>>;
using Len = input_node<"len", shape<dyn<"B">>, int>;

template <class Graph>
void check_mha(const Graph& g, std::int64_t b, std::int64_t t, std::int64_t s, bool cross, bool lens) {
  auto p = g.template make_params<double>(3);
  test::randomize(p, 4);  // non-zero biases too
  auto xs = test::random_tensor<double>({b, t, D}, 5);
  auto ms = test::random_tensor<double>({b, s, D}, 6);
  tensor<std::int32_t> ls({b});
  for (std::int64_t i = 0; i < b; ++i) ls[i] = static_cast<std::int32_t>(s - i % s);
  if (cross && lens) test::require_gradcheck(g, p, {{"x", xs}, {"mem", ms}, {"len", ls}});
  else if (cross) test::require_gradcheck(g, p, {{"x", xs}, {"mem", ms}});
  else if (lens) test::require_gradcheck(g, p, {{"x", xs}, {"len", ls}});
  else test::require_gradcheck(g, p, {{"x", xs}});
}
}  // namespace

TEMPLATE_TEST_CASE_SIG("multi-head self-attention passes gradcheck", "", ((int H), H), 1, 2, 4) {
  SECTION("no mask, batch 2") { check_mha(make_graph(nn::self_attention<"a", H>(X{})), 2, 3, 3, false, false); }
  SECTION("causal, batch 2") {
    check_mha(make_graph(nn::self_attention<"a", H>(X{}, nn::causal)), 2, 4, 4, false, false);
  }
  SECTION("padding, batch 3") {
    check_mha(make_graph(nn::self_attention<"a", H>(X{}, nn::padding(Len{}))), 3, 3, 3, false, true);
  }
  SECTION("causal and padding, batch 2") {
    check_mha(make_graph(nn::self_attention<"a", H>(X{}, nn::causal, nn::padding(Len{}))), 2, 3, 3, false, true);
  }
}

TEMPLATE_TEST_CASE_SIG("multi-head cross-attention passes gradcheck with S != T", "", ((int H), H), 1, 2, 4) {
  SECTION("no mask") {
    check_mha(make_graph(nn::cross_attention<"c", H>(X{}, Mem{})), 2, 3, 5, true, false);
  }
  SECTION("padding of the memory") {
    check_mha(make_graph(nn::cross_attention<"c", H>(X{}, Mem{}, nn::padding(Len{}))), 3, 2, 4, true, true);
  }
}

TEMPLATE_TEST_CASE_SIG("one decode row: T = 1 query against S keys, causal offset S - 1", "", ((int H), H), 1, 2, 4) {
  // the query is the last position of the sequence: it sees every key
  auto q = input<"q", shape<dyn<"B">, fix<H>, fix<1>, fix<2>>>();
  auto k = input<"k", shape<dyn<"B">, fix<H>, dyn<"S">, fix<2>>>();
  auto v = input<"v", shape<dyn<"B">, fix<H>, dyn<"S">, fix<2>>>();
  auto g = make_graph(nn::attention(q, k, v, nn::causal));
  param_store<double> p;
  test::require_gradcheck(g, p,
                          {{"q", test::random_tensor<double>({2, H, 1, 2}, 1)},
                           {"k", test::random_tensor<double>({2, H, 5, 2}, 2)},
                           {"v", test::random_tensor<double>({2, H, 5, 2}, 3)}});
}

TEST_CASE("gradcheck catches a wrong backward") {
  auto g = make_graph(nn::self_attention<"a", 2>(X{}, nn::causal));
  auto p = g.make_params<double>(3);
  test::randomize(p, 4);
  auto xs = test::random_tensor<double>({2, 3, D}, 5);
  const gradcheck_options unfused{.fuse = 0};  // the primitives as written, not the fused attention
  REQUIRE(gradcheck(g, p, {{"x", xs}}, unfused).ok);
  SECTION("softmax's gradient added twice") {
    testing::scoped_corruption broken(entry_of<softmax_op>, testing::corruption::run_twice);
    auto r = gradcheck(g, p, {{"x", xs}}, unfused);
    CHECK_FALSE(r.ok);
    CHECK(r.failed > 0);
    CHECK_THAT(r.str(), Catch::Contains("FAILED") && Catch::Contains("analytic"));
  }
  SECTION("matmul's backward skipped") {
    testing::scoped_corruption broken(entry_of<matmul_def>, testing::corruption::skip);
    CHECK_FALSE(gradcheck(g, p, {{"x", xs}}, unfused).ok);
  }
  SECTION("the fused attention's gradient added twice") {
    REQUIRE(gradcheck(g, p, {{"x", xs}}, {.fuse = 1}).ok);
    const op_entry* fused = nullptr;
    for (const op_entry* op : registered_ops())
      if (op->name == "attention") fused = op;
    REQUIRE(fused);
    testing::scoped_corruption broken(*fused, testing::corruption::run_twice);
    CHECK_FALSE(gradcheck(g, p, {{"x", xs}}, {.fuse = 1}).ok);
    CHECK(gradcheck(g, p, {{"x", xs}}, unfused).ok);  // the unfused graph does not use it
  }
  REQUIRE(gradcheck(g, p, {{"x", xs}}).ok);  // and the kernels are restored afterwards
}

TEST_CASE("gradcheck reports the worst element by name and index") {
  auto g = make_graph(nn::self_attention<"a", 2>(X{}));
  auto p = g.make_params<double>(3);
  auto xs = test::random_tensor<double>({1, 2, D}, 5);
  testing::scoped_corruption broken(entry_of<scale_def>, testing::corruption::run_twice);
  auto r = gradcheck(g, p, {{"x", xs}}, {.fuse = 0});
  REQUIRE_FALSE(r.ok);
  CHECK_FALSE(r.worst_name.empty());
  CHECK((r.worst_name.find("param") == 0 || r.worst_name.find("input") == 0));
  CHECK_FALSE(r.worst_index.empty());
  CHECK(std::abs(r.analytic - r.numeric) > 1e-5);
}
