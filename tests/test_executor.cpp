// The executor: scheduling, gradient fan-in, buffer reuse, thread-count independence.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "test_support.hpp"

using namespace loom;

TEST_CASE("a value used three times receives the sum of three gradients") {
  // y = Σ (2x + 3x + x·1): dy/dx = 6 everywhere
  auto x = input<"x", shape<dyn<"T">, fix<3>>>();
  auto y = sum(add(add(scale<2.0>(x), scale<3.0>(x)), x));
  auto g = make_graph(y);
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  auto xs = test::random_tensor<double>({4, 3}, 1);
  run.forward({{"x", xs}});
  run.backward();
  auto dx = run.input_grad("x");
  for (std::int64_t i = 0; i < dx.size(); ++i) CHECK(dx[i] == 6.0);
}

TEST_CASE("backward with a cotangent computes a vector-Jacobian product") {
  // y = 2.5 x: with cotangent w, dx = 2.5 w
  auto x = input<"x", shape<fix<2>, fix<2>>>();
  auto g = make_graph(scale<2.5>(x));
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  tensor<double> xs({2, 2}, {1, 2, 3, 4});
  run.forward({{"x", xs}});
  std::vector<tensor<double>> w{tensor<double>({2, 2}, {1, -1, 0.5, 2})};
  run.backward(w);
  auto dx = run.input_grad("x");
  CHECK(dx[0] == 2.5);
  CHECK(dx[1] == -2.5);
  CHECK(dx[2] == 1.25);
  CHECK(dx[3] == 5.0);
}

TEST_CASE("backward() from a non-scalar output asks for a loss or cotangents") {
  auto x = input<"x", shape<fix<2>>>();
  auto g = make_graph(scale<2.0>(x));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({2}, {1, 2});
  CHECK_THROWS_AS(run.backward(), error);  // before forward
  run.forward({{"x", xs}});
  CHECK_THROWS_AS(run.backward(), shape_error);
}

TEST_CASE("buffers are allocated once and reused while the bound dims fit") {
  auto x = input<"x", shape<dyn<"T">, fix<8>>>();
  auto g = make_graph(softmax(scale<2.0>(x)));
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> big({16, 8}), small({3, 8});
  run.forward({{"x", big}});
  const auto bytes = run.arena_bytes();
  const float* out_before = run.output().data;
  run.forward({{"x", small}});
  CHECK(run.arena_bytes() == bytes);
  CHECK(run.output().data == out_before);
  CHECK(run.output().dims[0] == 3);
  tensor<float> bigger({32, 8});
  run.forward({{"x", bigger}});
  CHECK(run.arena_bytes() > bytes);
}

TEST_CASE("an executor bound to shapes A then B then A again gives what a fresh executor gives for each") {
  // the placement of the arena's buffers is kept while their sizes repeat (buffers.cpp): going
  // back to A after B must place A's buffers again, as a fresh executor would
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<16>>>();
  auto y = nn::self_attention<"attn", 2>(x, nn::causal);
  auto g = make_graph(sum(nn::linear<"out", 8>(y)));
  auto p = g.make_params<double>(3);
  auto step = [&](executor<double>& run, const tensor<double>& in) {
    run.forward({{"x", in}});
    run.backward();
    std::vector<double> all{run.output()[0]};
    for (auto& [name, e] : p) all.insert(all.end(), e.grad.values().begin(), e.grad.values().end());
    return all;
  };
  const auto a = test::random_tensor<double>({2, 9, 16}, 1), b = test::random_tensor<double>({3, 20, 16}, 2);
  auto fresh_a = g.executor<double>(p), fresh_b = g.executor<double>(p);
  const auto want_a = step(fresh_a, a), want_b = step(fresh_b, b);
  auto run = g.executor<double>(p);
  for (int round = 0; round < 2; ++round) {
    CHECK(step(run, a) == want_a);
    CHECK(step(run, b) == want_b);
  }
}

namespace {
// Multi-head attention with a loss, run forward and backward with the given thread count;
// returns the loss and every parameter gradient, concatenated.
std::vector<float> mha_run(int threads) {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<32>>>();
  auto len = input<"len", shape<dyn<"B">>, int>();
  auto y = nn::self_attention<"attn", 4>(x, nn::causal, nn::padding(len));
  auto g = make_graph(sum(y));
  auto p = g.make_params<float>(7);
  auto run = g.executor<float>(p, {.threads = threads});
  auto xs = test::random_tensor<float>({3, 40, 32}, 3);
  tensor<std::int32_t> lens({3}, {40, 17, 33});
  run.forward({{"x", xs}, {"len", lens}});
  run.backward();
  std::vector<float> all{run.output()[0]};
  for (auto& [name, e] : p) all.insert(all.end(), e.grad.values().begin(), e.grad.values().end());
  return all;
}
}  // namespace

TEST_CASE("results are bit-identical for 1, 2 and 4 threads") {
  auto one = mha_run(1);
  auto two = mha_run(2);
  auto four = mha_run(4);
  REQUIRE(one.size() == two.size());
  REQUIRE(one.size() == four.size());
  CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(one.data(), four.data(), one.size() * sizeof(float)) == 0);
}

namespace {
// One row through a wide linear layer (a decoding step's shape): the product is a GEMV that
// runs in column chunks in parallel. Returns the output, then every parameter gradient.
std::vector<float> one_row_run(int threads, std::vector<float>* reference = nullptr) {
  auto x = input<"x", shape<dyn<"B">, fix<256>>>();
  auto g = make_graph(sum(nn::linear<"wide", 1030>(x)));  // 1030: a last chunk that is not whole
  auto p = g.make_params<float>(11);
  auto run = g.executor<float>(p, {.threads = threads});
  auto xs = test::random_tensor<float>({1, 256}, 5);
  run.forward({{"x", xs}});
  run.backward();
  if (reference) {  // Σ_j (x · W_jᵀ + b_j) in double
    double total = 0;
    const auto& w = p.value("wide.weight");
    const auto& b = p.value("wide.bias");
    for (std::int64_t j = 0; j < 1030; ++j) {
      double dot = b[j];
      for (std::int64_t k = 0; k < 256; ++k) dot += double(xs[k]) * double(w[j * 256 + k]);
      total += dot;
    }
    reference->push_back(static_cast<float>(total));
  }
  std::vector<float> all{run.output()[0]};
  for (auto& [name, e] : p) all.insert(all.end(), e.grad.values().begin(), e.grad.values().end());
  return all;
}
}  // namespace

TEST_CASE("one-row products (decoding) run in parallel column chunks: the same bits for 1, 2 and 4 threads") {
  std::vector<float> reference;
  auto one = one_row_run(1, &reference);
  auto two = one_row_run(2);
  auto four = one_row_run(4);
  REQUIRE(one.size() == two.size());
  REQUIRE(one.size() == four.size());
  CHECK(one[0] == Approx(reference[0]).epsilon(1e-4));
  CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(one.data(), four.data(), one.size() * sizeof(float)) == 0);
}

namespace {
// A weight gradient big enough to be split into column blocks (dW [256, 64] summed over 512
// rows: two blocks of 32 columns). With loss = Σ linear(x), dW[j, i] = Σ_rows x[r, i].
std::vector<float> weight_gradient_run(int threads, double* worst_error = nullptr) {
  auto x = input<"x", shape<dyn<"B">, fix<64>>>();
  auto g = make_graph(sum(nn::linear<"ffn", 256>(x)));
  auto p = g.make_params<float>(13);
  auto run = g.executor<float>(p, {.threads = threads});
  auto xs = test::random_tensor<float>({512, 64}, 9);
  run.forward({{"x", xs}});
  run.backward();
  const auto& dw = p.grad("ffn.weight");
  if (worst_error) {
    *worst_error = 0;
    for (std::int64_t i = 0; i < 64; ++i) {
      double col = 0, mag = 0;
      for (std::int64_t r = 0; r < 512; ++r) {
        col += xs[r * 64 + i];
        mag += std::abs(double(xs[r * 64 + i]));
      }
      for (std::int64_t j = 0; j < 256; ++j)
        *worst_error = std::max(*worst_error, std::abs(double(dw[j * 64 + i]) - col) / mag);
    }
  }
  return std::vector<float>(dw.values().begin(), dw.values().end());
}
}  // namespace

TEST_CASE("weight gradients computed in parallel column blocks: the same bits for 1, 2 and 4 threads") {
  double worst = 1;
  auto one = weight_gradient_run(1, &worst);
  auto two = weight_gradient_run(2);
  auto four = weight_gradient_run(4);
  CHECK(worst < 1e-6);
  CHECK(one == two);
  CHECK(one == four);
}

namespace {
// The bias gradient of a linear layer of N outputs: db[j] = Σ_rows c[r, j] for loss = Σ linear(x) ⊙ c.
// The column sums take four tiles of 16 side by side, then single tiles, then single columns:
// N = 83 has all three (64 + 16 + 3), N = 200 three groups of four tiles and a tail of 8.
template <int N>
std::vector<float> bias_gradient_run(int threads, double* worst_error = nullptr) {
  auto x = input<"x", shape<dyn<"B">, fix<24>>>();
  auto c = input<"c", shape<dyn<"B">, fix<N>>>();
  auto g = make_graph(sum(mul(nn::linear<"l", N>(x), c)));
  auto p = g.template make_params<float>(17);
  auto run = g.template executor<float>(p, {.threads = threads});
  constexpr std::int64_t rows = 301;
  auto xs = test::random_tensor<float>({rows, 24}, 3);
  auto cs = test::random_tensor<float>({rows, N}, 4);
  run.forward({{"x", xs}, {"c", cs}});
  run.backward();
  const auto& db = p.grad("l.bias");
  if (worst_error) {
    *worst_error = 0;
    for (std::int64_t j = 0; j < N; ++j) {
      double col = 0, mag = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        col += cs[r * N + j];
        mag += std::abs(double(cs[r * N + j]));
      }
      *worst_error = std::max(*worst_error, std::abs(double(db[j]) - col) / mag);
    }
  }
  return std::vector<float>(db.values().begin(), db.values().end());
}
}  // namespace

TEMPLATE_TEST_CASE_SIG("bias gradients over ragged column counts: the row sums, the same bits for 1, 2 and 4 threads", "",
                       ((int N), N), 3, 83, 200) {
  double worst = 1;
  auto one = bias_gradient_run<N>(1, &worst);
  auto two = bias_gradient_run<N>(2);
  auto four = bias_gradient_run<N>(4);
  REQUIRE(one.size() == static_cast<std::size_t>(N));
  CHECK(worst < 1e-6);
  CHECK(one == two);
  CHECK(one == four);
}

TEST_CASE("repeated runs give identical results and gradients are overwritten, not accumulated") {
  auto a = mha_run(2);
  auto b = mha_run(2);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);

  auto x = input<"x", shape<fix<2>>>();
  auto w = param<"w", shape<fix<2>>>();
  auto g = make_graph(sum(add(x, w)));
  param_store<double> p;
  p.set("w", tensor<double>({2}, {0, 0}));
  auto run = g.executor<double>(p);
  tensor<double> xs({2}, {1, 2});
  run.forward({{"x", xs}});
  run.backward();
  run.forward({{"x", xs}});
  run.backward();
  CHECK(p.grad("w")[0] == 1.0);
}

TEST_CASE("value() reads a kept node of the graph and rejects nodes of other graphs") {
  auto x = input<"x", shape<fix<2>>>();
  auto s = scale<3.0>(x);
  auto g = make_graph(sum(s));
  param_store<double> p;
  auto run = g.executor<double>(p);
  run.keep(s);
  tensor<double> xs({2}, {1, 2});
  run.forward({{"x", xs}});
  CHECK(run.value(s)[1] == 6.0);
  CHECK(run.value(x)[1] == 2.0);  // inputs are always readable
  CHECK(run.output()[0] == 9.0);
  CHECK_THROWS_AS(run.value(scale<4.0>(x)), error);
}

TEST_CASE("value() of a node the memory plan did not keep says how to keep it") {
  auto x = input<"x", shape<fix<2>>>();
  auto s = scale<3.0>(x);
  auto g = make_graph(sum(relu(s)));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({2}, {1, 2});
  run.forward({{"x", xs}});
  const std::string message = test::message_of([&] { (void)run.value(s); });
  CHECK_THAT(message, Catch::Contains("was not kept") && Catch::Contains("keep(node)") &&
                          Catch::Contains("keep_all"));
  auto debug = g.executor<double>(p, {.keep_all = true});
  debug.forward({{"x", xs}});
  CHECK(debug.value(s)[0] == 3.0);
}

TEST_CASE("the plan lists nodes in topological order with their consumers") {
  auto x = input<"x", shape<fix<2>>>();
  auto a = scale<2.0>(x);
  auto g = make_graph(add(a, scale<3.0>(a)));
  auto plan = g.plan();
  REQUIRE(plan.size() == 4);
  for (int i = 0; i < plan.size(); ++i)
    for (int j : plan.inputs(i)) CHECK(j < i);
  // a (index 1) feeds scale<3> and add
  CHECK(plan.consumers(1).size() == 2);
}

TEST_CASE("the graph can be written as Graphviz DOT") {
  auto x = input<"x", shape<dyn<"T">, fix<2>>>();
  auto g = make_graph(softmax(x));
  auto dot = g.dot();
  CHECK_THAT(dot, Catch::StartsWith("digraph loom {") && Catch::Contains("input x\\n[T, 2]") &&
                      Catch::Contains("softmax") && Catch::Contains("n0 -> n1"));
}

TEST_CASE("a named node is read by its name after forward, wherever it is in the graph") {
  // y = 3x is inside the graph (its buffer would be reused); named, it is kept and readable
  auto x = input<"x", shape<dyn<"T">, fix<2>>>();
  auto y = named<"tripled">(scale<3.0>(x));
  auto g = make_graph(named<"loss">(sum(mul(y, y))));
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  tensor<double> xs({2, 2}, {1, 2, -1, 0.5});
  run.forward({{"x", xs}});
  auto tripled = run.output("tripled");
  REQUIRE(tripled.dims == dims_t{2, 2});
  for (std::int64_t i = 0; i < 4; ++i) CHECK(tripled[i] == 3 * xs[i]);
  CHECK(run.output("loss")[0] == 9 * (1 + 4 + 1 + 0.25));
  CHECK(run.output(0)[0] == run.output("loss")[0]);
  run.backward();  // d/dx Σ (3x)² = 18x, through the named view
  for (std::int64_t i = 0; i < 4; ++i) CHECK(run.input_grad("x")[i] == 18 * xs[i]);
  const std::string message = test::message_of([&] { run.output("trippled"); });
  CHECK_THAT(message, Catch::Contains("no output named \"trippled\"") && Catch::Contains("\"loss\", \"tripled\""));
  CHECK_THROWS_AS(run.output("trippled"), missing_error);
  CHECK_THAT(g.dot(), Catch::Contains("named\\n\\\"tripled\\\""));
}

TEST_CASE("make_graph takes tuples of outputs, in order") {
  auto x = input<"x", shape<fix<3>>>();
  auto g = make_graph(std::make_tuple(scale<2.0>(x), scale<3.0>(x)), scale<4.0>(x));
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> xs({3}, {1, 2, 3});
  run.forward({{"x", xs}});
  CHECK(run.output(0)[2] == 6);
  CHECK(run.output(1)[2] == 9);
  CHECK(run.output(2)[2] == 12);
}

TEST_CASE("the named outputs of one graph feed the inputs of the same names of another") {
  auto x = input<"x", shape<fix<2>>>();
  auto first = make_graph(std::make_tuple(named<"a">(scale<2.0>(x)), named<"b">(scale<-1.0>(x))));
  auto a = input<"a", shape<fix<2>>>();
  auto b = input<"b", shape<fix<2>>>();
  auto second = make_graph(add(a, b));
  param_store<double> p;
  auto run1 = first.executor<double>(p);
  auto run2 = second.executor<double>(p);
  tensor<double> xs({2}, {5, 7});
  run1.forward({{"x", xs}});
  run2.forward(run1.named_feeds());  // 2x + (−x)
  CHECK(run2.output()[0] == 5);
  CHECK(run2.output()[1] == 7);
}

TEST_CASE("asking a graph without names for a named output says it names none") {
  auto x = input<"x", shape<fix<2>>>();
  auto g = make_graph(scale<2.0>(x));
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> xs({2}, {1, 2});
  run.forward({{"x", xs}});
  CHECK_THAT(test::message_of([&] { run.output("y"); }), Catch::Contains("it names none"));
  CHECK_THROWS_AS(run.output_storage("y"), missing_error);
  CHECK(run.named_feeds().empty());
}

// ---- exec_options::profile ----

namespace {
// x → linear → relu → linear, the block closed by checkpoint (recomputed in backward), → sum
auto profiled_graph() {
  auto x = input<"x", shape<dyn<"B">, fix<64>>>();
  auto y = nn::linear<"b", 64>(relu(nn::linear<"a", 64>(x)));
  return make_graph(sum(checkpoint(y, x)));
}
}  // namespace

TEST_CASE("profile: every kernel that ran is timed per node, and the table sums them by op") {
  auto g = profiled_graph();
  auto params = g.make_params<float>(1);
  auto run = g.executor<float>(params, {.threads = 1, .profile = true});
  const tensor<float> x = test::random_tensor<float>({256, 64}, 3);
  for (int step = 0; step < 3; ++step) {
    run.forward({{"x", x}});
    run.backward();
  }
  run.forward({{"x", x}});  // a fourth forward without backward
  const profile_report r = run.profile();
  CHECK(r.forwards == 4);
  CHECK(r.backwards == 3);
  CHECK(r.threads == 1);
  REQUIRE(!r.nodes.empty());
  double kernels_forward = 0, kernels_backward = 0;
  int linears = 0, recomputed = 0;
  for (const node_time& t : r.nodes) {
    CHECK(t.node >= 0);
    CHECK(t.node < run.plan().size());
    CHECK(t.op == std::string(run.plan().order[static_cast<std::size_t>(t.node)]->op->name));
    CHECK(t.what == run.plan().describe(t.node));
    CHECK((t.forward_calls == 0 || t.forward_calls == 4));
    CHECK((t.backward_calls == 0 || t.backward_calls == 3));
    CHECK((t.recompute_calls == 0 || t.recompute_calls == 3));
    recomputed += t.recompute_calls > 0;
    if (t.op.starts_with("linear")) {  // linear_relu (fused) and linear: 256 × 64 × 64 multiply-adds each
      ++linears;
      CHECK(t.forward_s > 0);
      CHECK(t.backward_s > 0);
    }
    kernels_forward += t.forward_s;
    kernels_backward += t.backward_s + t.recompute_s;
  }
  CHECK(linears == 2);
  CHECK(recomputed >= 1);  // the checkpointed block's interior ran again in backward
  // at one thread the kernels run one after the other, inside the passes
  CHECK(kernels_forward <= r.forward_wall_s);
  CHECK(kernels_backward <= r.backward_wall_s);
  const std::string table = r.table();
  for (const char* part : {"linear_relu", "kernels", "passes (wall)", "between kernels", "per pass: 4 forward, 3 backward"})
    CHECK_THAT(table, Catch::Contains(part));
  CHECK_THAT(r.table(1), Catch::Contains("other ops)"));
  run.reset_profile();
  const profile_report empty = run.profile();
  CHECK(empty.nodes.empty());
  CHECK(empty.forwards == 0);
  CHECK(empty.forward_wall_s == 0);
  run.forward({{"x", x}});
  CHECK(run.profile().forwards == 1);
}

TEST_CASE("profile: the same bits as without it") {
  auto g = profiled_graph();
  const tensor<float> x = test::random_tensor<float>({96, 64}, 6);
  std::vector<float> got[2];
  for (int timed = 0; timed < 2; ++timed) {
    auto params = g.make_params<float>(1);
    auto run = g.executor<float>(params, {.threads = 2, .profile = timed == 1});
    run.forward({{"x", x}});
    run.backward();
    got[timed].push_back(run.output()[0]);
    for (const char* name : {"a.weight", "a.bias", "b.weight", "b.bias"})
      for (float v : params.grad(name).values()) got[timed].push_back(v);
  }
  REQUIRE(got[0].size() == got[1].size());
  CHECK(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)) == 0);
}

TEST_CASE("profile: an inference executor times forwards only, at two threads too") {
  auto g = profiled_graph();
  auto params = g.make_params<float>(1);
  auto run = g.executor<float>(params, {.threads = 2, .inference = true, .profile = true});
  run.forward({{"x", test::random_tensor<float>({64, 64}, 4)}});
  const profile_report r = run.profile();
  CHECK(r.forwards == 1);
  CHECK(r.backwards == 0);
  CHECK(r.threads == 2);
  for (const node_time& t : r.nodes) CHECK(t.backward_calls + t.recompute_calls == 0);
  CHECK_THAT(r.table(), !Catch::Contains("between kernels"));  // kernels may overlap at 2 threads
}

TEST_CASE("profile: off by default, and then profile() and reset_profile() refuse") {
  auto g = profiled_graph();
  auto params = g.make_params<float>(1);
  auto run = g.executor<float>(params);
  run.forward({{"x", test::random_tensor<float>({4, 64}, 5)}});
  CHECK_THAT(test::message_of([&] { (void)run.profile(); }), Catch::Contains("exec_options::profile"));
  CHECK_THAT(test::message_of([&] { run.reset_profile(); }), Catch::Contains("exec_options::profile"));
  CHECK(profile_report{}.table().find("kernels") != std::string::npos);  // the header and totals, no rows
}

TEST_CASE("for_chunks cuts the same pieces on one thread as on two") {
  // one thread takes a path of its own (no TBB tasks); the pieces must not change with it
  auto pieces = [](int threads, std::int64_t n, std::int64_t grain) {
    std::mutex m;
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    tbb::task_arena(threads).execute([&] {
      for_chunks(n, grain, [&](std::int64_t b, std::int64_t e) {
        const std::lock_guard<std::mutex> lock(m);
        out.emplace_back(b, e);
      });
    });
    std::sort(out.begin(), out.end());
    return out;
  };
  // the documented example (core/parallel.hpp): 192 items at grain 32 are 8 chunks of 24
  const auto doc = pieces(1, 192, 32);
  REQUIRE(doc.size() == 8);
  for (std::size_t i = 0; i < doc.size(); ++i)
    CHECK(doc[i] == std::pair<std::int64_t, std::int64_t>(24 * static_cast<std::int64_t>(i), 24 * static_cast<std::int64_t>(i + 1)));
  // every case has n > grain, so that for_chunks splits (n ≤ grain calls the body directly)
  for (const auto& [n, grain] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1000, 7}, {33, 32}, {65, 32}, {1023, 2}}) {
    const auto one = pieces(1, n, grain);
    CHECK(one == pieces(2, n, grain));
    std::int64_t at = 0;  // in order, covering [0, n), none longer than the grain
    for (const auto& [b, e] : one) {
      CHECK(b == at);
      CHECK(e - b <= grain);
      at = e;
    }
    CHECK(at == n);
  }
}

#if defined(__x86_64__)
// Whether every value of out is of the class fp_class (FP_ZERO, FP_SUBNORMAL).
template <class T>
bool every_value(const tensor_view<const T>& out, int fp_class) {
  for (std::int64_t i = 0; i < out.size(); ++i)
    if (std::fpclassify(out[i]) != fp_class) return false;
  return true;
}

TEST_CASE("exec_options::subnormals: flushed in float by default on every thread, kept in double, the caller restored") {
  const long rows = 4096;  // 2^18 elements: many chunks, shared by the worker threads
  auto x = input<"x", shape<dyn<"T">, fix<64>>>();
  auto g = make_graph(scale<1e-10>(x));  // 1e-30 · 1e-10 = 1e-40: subnormal in float
  tensor<float> xs({rows, 64});
  for (float& v : xs.values()) v = 1e-30f;
  // subnormal inputs: read as zero when flushed (DAZ), else 1e-40 · 1e10 = 1e-30, a normal float
  auto up = make_graph(scale<1e10>(x));
  tensor<float> tiny({rows, 64});
  for (float& v : tiny.values()) v = 1e-40f;
  for (int threads : {1, 2, 4}) {
    INFO(threads << " threads");
    param_store<float> p;
    auto flushed = g.executor<float>(p, {.threads = threads, .input_grads = true});
    flushed.forward({{"x", xs}});
    CHECK(every_value(flushed.output(), FP_ZERO));
    std::vector<tensor<float>> w{xs};  // the cotangent 1e-30: dx = 1e-40, flushed
    flushed.backward(w);
    CHECK(every_value(flushed.input_grad("x"), FP_ZERO));
    auto up_flushed = up.executor<float>(p, {.threads = threads});
    up_flushed.forward({{"x", tiny}});
    CHECK(every_value(up_flushed.output(), FP_ZERO));
    auto kept = g.executor<float>(p, {.threads = threads, .subnormals = subnormal_mode::keep});
    kept.forward({{"x", xs}});
    CHECK(every_value(kept.output(), FP_SUBNORMAL));
    auto up_kept = up.executor<float>(p, {.threads = threads, .subnormals = subnormal_mode::keep});
    up_kept.forward({{"x", tiny}});
    CHECK(every_value(up_kept.output(), FP_NORMAL));
    // the calling thread computes with its own mode again
    volatile float a = 1e-30f, b = 1e-10f;
    CHECK(std::fpclassify(a * b) == FP_SUBNORMAL);
  }
  // double keeps them unless asked: 1e-300 · 1e-10 is subnormal in double
  auto xd = input<"x", shape<dyn<"T">, fix<64>>>();
  auto gd = make_graph(scale<1e-10>(xd));
  tensor<double> xds({rows, 64});
  for (double& v : xds.values()) v = 1e-300;
  param_store<double> pd;
  auto kept = gd.executor<double>(pd, {.threads = 2});
  kept.forward({{"x", xds}});
  CHECK(every_value(kept.output(), FP_SUBNORMAL));
  auto flushed = gd.executor<double>(pd, {.threads = 2, .subnormals = subnormal_mode::flush});
  flushed.forward({{"x", xds}});
  CHECK(every_value(flushed.output(), FP_ZERO));
}
#endif
