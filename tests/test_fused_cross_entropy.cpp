// A head and its loss as one node: cross_entropy(linear(x), target) runs as linear_cross_entropy
// (ops/fused_cross_entropy.hpp), in row chunks that keep no [N, V] logits. It must give what the
// primitives give (to 1e-12 in double: the loss and every gradient; the same bits in float when
// the logits fit in one chunk), pass gradcheck with one chunk and with several, stay
// thread-count independent, and need less memory than the unfused plan when the logits are large.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include "loom/loom.hpp"
#include "loom/nn/decoder.hpp"
#include "test_support.hpp"

#include "../ops/fused_cross_entropy.hpp"  // linear_cross_entropy_force_rows

using namespace loom;
using test::max_rel;
using test::ops_of;

namespace {

constexpr long K = 6, V = 7;
using X = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<K>>>;
using Target = input_node<"t", shape<dyn<"B">, dyn<"T">>, int>;

// The rows per chunk of plans made while it lives (0: the shape's rule).
struct forced_rows {
  explicit forced_rows(std::int64_t rows) { ops::linear_cross_entropy_force_rows(rows); }
  ~forced_rows() { ops::linear_cross_entropy_force_rows(0); }
};


// Targets for [b, t] rows in [0, V), every third one `ignore` when given.
tensor<std::int32_t> targets(std::int64_t b, std::int64_t t, std::uint64_t seed, std::int32_t ignore = 0,
                             bool with_ignored = false) {
  tensor<std::int32_t> out(dims_t{b, t});
  for (std::int64_t i = 0; i < out.size(); ++i)
    out[i] = with_ignored && i % 3 == 1 ? ignore : static_cast<std::int32_t>((i * 5 + seed) % V);
  return out;
}

// The loss and every gradient (parameters, then x) of one forward + backward.
template <class T>
struct run_result {
  std::vector<T> loss, grads;
};
template <class T, class G>
run_result<T> run(const G& g, param_store<T>& p, std::span<const feed> feeds, exec_options o) {
  o.input_grads = true;
  auto ex = g.template executor<T>(p, o);
  ex.forward(feeds);
  run_result<T> r;
  auto y = ex.output();
  r.loss.assign(y.data, y.data + y.size());
  ex.backward();
  for (auto& [name, e] : p) r.grads.insert(r.grads.end(), e.grad.values().begin(), e.grad.values().end());
  auto gx = ex.input_grad("x");
  r.grads.insert(r.grads.end(), gx.data, gx.data + gx.size());
  return r;
}


// The fused plan has one linear_cross_entropy node and neither the product nor the loss; it
// equals the unfused one in double and passes gradcheck.
template <class G>
void require_fused_equals_unfused(const G& g, std::initializer_list<feed> feeds) {
  auto p = g.template make_params<double>(3);
  test::randomize(p, 4);
  const std::vector<feed> fs(feeds);
  const executor<double> probe(g.plan(), p, {.fuse = true});
  const auto ops = ops_of(probe.plan());
  CHECK(ops.count("linear_cross_entropy") == 1);
  CHECK(ops.count("cross_entropy") == 0);
  CHECK(ops.count("matmul") == 0);
  CHECK(ops.count("add") == 0);
  const auto unfused = run(g, p, fs, {.fuse = false});
  const auto fused = run(g, p, fs, {.fuse = true});
  CHECK(max_rel(fused.loss, unfused.loss) <= 1e-12);
  CHECK(max_rel(fused.grads, unfused.grads) <= 1e-12);
  // something to compare: a loss and gradients that are not all zero
  CHECK(std::abs(unfused.loss[0]) > 0.1);
  CHECK(max_rel(unfused.grads, std::vector<double>(unfused.grads.size(), 0.0)) > 0);
  test::require_gradcheck(g, p, feeds, {.fuse = 1});
}

}  // namespace

TEST_CASE("a head and its cross-entropy fuse and equal the primitives, one chunk or several") {
  const std::int64_t rows = GENERATE(0, 5, 4);  // forced rows per chunk (0: the shape's rule, one chunk here)
  forced_rows force(rows);
  INFO("rows per chunk " << rows);
  auto x = test::random_tensor<double>({2, 5, K}, 7);  // 10 rows: chunks of 5 + 5 or 4 + 4 + 2
  SECTION("with a bias") {
    require_fused_equals_unfused(make_graph(cross_entropy(nn::linear<"head", V>(X{}), Target{})),
                                 {{"x", x}, {"t", targets(2, 5, 1)}});
  }
  SECTION("without a bias (a tied or bias-free head)") {
    require_fused_equals_unfused(make_graph(cross_entropy(nn::linear<"head", V, false>(X{}), Target{})),
                                 {{"x", x}, {"t", targets(2, 5, 2)}});
  }
  SECTION("ignored rows and label smoothing") {
    require_fused_equals_unfused(
        make_graph(cross_entropy<-1, 0.1>(nn::linear<"head", V>(X{}), Target{})),
        {{"x", x}, {"t", targets(2, 5, 3, -1, true)}});
  }
  SECTION("a loss scaled after the fused node: backward scales the saved gradients by dloss") {
    require_fused_equals_unfused(make_graph(scale<-2.5>(cross_entropy(nn::linear<"head", V>(X{}), Target{}))),
                                 {{"x", x}, {"t", targets(2, 5, 5)}});
  }
  SECTION("label smoothing without a bias, PyTorch's default ignore index") {
    require_fused_equals_unfused(
        make_graph(cross_entropy<-100, 0.25>(nn::linear<"head", V, false>(X{}), Target{})),
        {{"x", x}, {"t", targets(2, 5, 4, -100, true)}});
  }
}

namespace {
constexpr long K2 = 64, V2 = 300;
using X2 = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<K2>>>;

// Loss and gradients in float of cross_entropy(linear(x)) over [4, 100] rows.
std::vector<float> float_run(exec_options o, std::uint64_t seed = 5) {
  auto g = make_graph(cross_entropy(nn::linear<"head", V2>(X2{}), Target{}));
  auto p = g.make_params<float>(seed);
  auto x = test::random_tensor<float>({4, 100, K2}, seed + 1, -2, 2);
  tensor<std::int32_t> t(dims_t{4, 100});
  for (std::int64_t i = 0; i < t.size(); ++i) t[i] = i % 7 == 3 ? -100 : static_cast<std::int32_t>((i * 37) % V2);
  o.input_grads = true;
  auto ex = g.executor<float>(p, o);
  ex.forward({{"x", x}, {"t", t}});
  ex.backward();
  std::vector<float> all{ex.output()[0]};
  for (auto& [name, e] : p) all.insert(all.end(), e.grad.values().begin(), e.grad.values().end());
  auto gx = ex.input_grad("x");
  all.insert(all.end(), gx.data, gx.data + gx.size());
  return all;
}
}  // namespace

TEST_CASE("a chunk over more than 2048 classes, its products split by classes, equals the primitives, and gives "
          "the same float bits for 1, 2 and 4 threads") {
  constexpr long Vw = 2500, Kw = 8;  // two blocks of classes: 2048 and 452
  using Xw = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<Kw>>>;
  forced_rows force(16);  // 40 rows: chunks of 16, 16 and 8
  auto g = make_graph(cross_entropy<-100, 0.05>(nn::linear<"head", Vw>(Xw{}), Target{}));
  tensor<std::int32_t> t(dims_t{2, 20});
  for (std::int64_t i = 0; i < t.size(); ++i) t[i] = i % 9 == 4 ? -100 : static_cast<std::int32_t>((i * 613) % Vw);
  {
    auto p = g.make_params<double>(14);
    test::randomize(p, 15);
    const std::vector<feed> fs{{"x", test::random_tensor<double>({2, 20, Kw}, 16)}, {"t", t}};
    const executor<double> probe(g.plan(), p, {.fuse = true});
    REQUIRE(ops_of(probe.plan()).count("linear_cross_entropy") == 1);
    const auto unfused = run(g, p, fs, {.fuse = false});
    const auto fused = run(g, p, fs, {.fuse = true});
    CHECK(max_rel(fused.loss, unfused.loss) <= 1e-12);
    CHECK(max_rel(fused.grads, unfused.grads) <= 1e-12);
  }
  auto p = g.make_params<float>(14);
  const std::vector<feed> fs{{"x", test::random_tensor<float>({2, 20, Kw}, 16)}, {"t", t}};
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 4}) {
    const auto r = run(g, p, fs, {.threads = threads, .fuse = true});
    results.push_back(r.loss);
    results.back().insert(results.back().end(), r.grads.begin(), r.grads.end());
  }
  CHECK(test::same_bits(results[0], results[1]));
  CHECK(test::same_bits(results[0], results[2]));
}

TEST_CASE("in float, a head whose logits fit in one chunk gives the unfused bits") {
  const auto unfused = float_run({.fuse = false});
  const auto fused = float_run({.fuse = true});
  REQUIRE(fused.size() == unfused.size());
  CHECK(test::same_bits(fused, unfused));
  CHECK(std::abs(fused[0] - std::log(300.0f)) < 1.5f);  // near log V for a fresh head: a real loss
}

TEST_CASE("in float, a head in several chunks gives the same bits for 1, 2 and 4 threads, and the unfused "
          "values to rounding") {
  forced_rows force(96);  // 400 rows: chunks of 96, the last one 16
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 4}) results.push_back(float_run({.threads = threads, .fuse = true}));
  CHECK(test::same_bits(results[0], results[1]));
  CHECK(test::same_bits(results[0], results[2]));
  const auto unfused = float_run({.fuse = false});
  REQUIRE(unfused.size() == results[0].size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < unfused.size(); ++i) {
    diff = std::max(diff, std::abs(double(results[0][i]) - unfused[i]));
    scale = std::max(scale, std::abs(double(unfused[i])));
  }
  CHECK(scale > 0);
  CHECK(diff <= 1e-5 * scale);
}

TEST_CASE("with bf16 products, the fused head gives the unfused loss and gradients to bf16's rounding") {
  forced_rows force(96);
  const auto unfused = float_run({.fuse = false, .precision = compute_precision::bf16});
  const auto fused = float_run({.fuse = true, .precision = compute_precision::bf16});
  const auto f32 = float_run({.fuse = false});
  REQUIRE(fused.size() == unfused.size());
  CHECK(std::abs(fused[0] - unfused[0]) <= 1e-5f * unfused[0]);  // the loss
  double diff = 0, from_f32 = 0, scale = 0;                       // the gradients
  for (std::size_t i = 1; i < unfused.size(); ++i) {
    diff = std::max(diff, std::abs(double(fused[i]) - unfused[i]));
    from_f32 = std::max(from_f32, std::abs(double(unfused[i]) - f32[i]));
    scale = std::max(scale, std::abs(double(unfused[i])));
  }
  CHECK(diff <= 1e-4 * scale);    // the same bf16 products, summed in another order
  CHECK(from_f32 > 1e-3 * scale);  // and they are bf16's: not float32's values
}

TEST_CASE("the fused head keeps no [N, V] logits: a smaller plan when they are large") {
  // 2048 rows of 2048 classes: 4 M logits, two chunks of 1024 rows
  constexpr long Kb = 64, Vb = 2048;
  using Xb = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<Kb>>>;
  auto g = make_graph(cross_entropy(nn::linear<"head", Vb>(Xb{}), Target{}));
  const auto fused = g.memory_plan<float>({{"B", 8}, {"T", 256}}, {.fuse = true});
  const auto unfused = g.memory_plan<float>({{"B", 8}, {"T", 256}}, {.fuse = false});
  INFO(fused.str(8) << unfused.str(8));
  for (const auto& b : fused.buffers) CHECK(b.shape.find("256, 2048]") == std::string::npos);
  // unfused: the logits and their gradient, 2 × 16 MiB; fused: 1024 rows' logits, 8 MiB
  CHECK(fused.peak_bytes < unfused.peak_bytes / 3);
}

TEST_CASE("a head's logits that are read elsewhere, kept or an output are not fused away") {
  auto x = test::random_tensor<double>({1, 4, K}, 9);
  auto t = targets(1, 4, 5);
  SECTION("the logits are also an output") {
    auto logits = nn::linear<"head", V>(X{});
    auto g = make_graph(cross_entropy(logits, Target{}), logits);
    auto p = g.make_params<double>(1);
    const executor<double> ex(g.plan(), p, {.fuse = true});
    CHECK(ops_of(ex.plan()).count("linear_cross_entropy") == 0);
    CHECK(ops_of(ex.plan()).count("cross_entropy") == 1);
  }
  SECTION("the logits are kept: the pattern runs unfused, and they are readable") {
    auto logits = nn::linear<"head", V>(X{});
    auto g = make_graph(cross_entropy(logits, Target{}));
    auto p = g.make_params<double>(1);
    auto ex = g.executor<double>(p, {.fuse = true});
    ex.forward({{"x", x}, {"t", t}});
    CHECK(ops_of(ex.plan()).count("linear_cross_entropy") == 1);
    CHECK_THAT(test::message_of([&] { ex.value(logits); }), Catch::Contains("was fused into linear_cross_entropy"));
    ex.keep(logits);
    ex.forward({{"x", x}, {"t", t}});
    CHECK(ops_of(ex.plan()).count("linear_cross_entropy") == 0);
    CHECK(ex.value(logits).dims == dims_t{1, 4, V});
  }
}

TEST_CASE("the fused head's bad and degenerate input: a target out of range, every row ignored, no rows") {
  auto g = make_graph(cross_entropy(nn::linear<"head", V>(X{}), Target{}));
  auto p = g.make_params<double>(2);
  auto ex = g.executor<double>(p, {.input_grads = true, .fuse = true});
  REQUIRE(ops_of(ex.plan()).count("linear_cross_entropy") == 1);
  auto x = test::random_tensor<double>({1, 3, K}, 10);
  SECTION("a target out of range names its position") {
    CHECK_THROWS_AS(ex.forward({{"x", x}, {"t", tensor<std::int32_t>(dims_t{1, 3}, {0, V, 1})}}), value_error);
    CHECK_THAT(test::message_of([&] { ex.forward({{"x", x}, {"t", tensor<std::int32_t>(dims_t{1, 3}, {0, -2, 1})}}); }),
               Catch::Contains("target -2 at position [0, 1]"));
    // the executor is still usable
    ex.forward({{"x", x}, {"t", targets(1, 3, 1)}});
    CHECK(std::isfinite(ex.output()[0]));
  }
  SECTION("every row ignored: loss 0 and zero gradients, as the unfused op") {
    ex.forward({{"x", x}, {"t", tensor<std::int32_t>(dims_t{1, 3}, {-100, -100, -100})}});
    CHECK(ex.output()[0] == 0.0);
    ex.backward();
    for (auto& [name, e] : p)
      for (double v : e.grad.values()) CHECK(v == 0.0);
    auto gx = ex.input_grad("x");
    for (std::int64_t i = 0; i < gx.size(); ++i) CHECK(gx.data[i] == 0.0);
  }
  SECTION("no rows (batch 0): loss 0") {
    ex.forward({{"x", tensor<double>(dims_t{0, 3, K})}, {"t", tensor<std::int32_t>(dims_t{0, 3})}});
    CHECK(ex.output()[0] == 0.0);
    ex.backward();
    for (auto& [name, e] : p)
      for (double v : e.grad.values()) CHECK(v == 0.0);
  }
}

TEST_CASE("an inference executor's fused head gives the training executor's loss, and so does a forward with "
          "no backward after it") {
  forced_rows force(4);
  auto g = make_graph(cross_entropy<-1, 0.1>(nn::linear<"head", V>(X{}), Target{}));
  auto p = g.make_params<float>(8);
  auto x = test::random_tensor<float>({2, 5, K}, 11);
  auto t = targets(2, 5, 6, -1, true);
  auto train = g.executor<float>(p, {.fuse = true});
  auto infer = g.executor<float>(p, {.inference = true, .fuse = true});
  auto unfused = g.executor<float>(p, {.inference = true, .fuse = false});
  REQUIRE(ops_of(infer.plan()).count("linear_cross_entropy") == 1);
  train.forward({{"x", x}, {"t", t}});
  infer.forward({{"x", x}, {"t", t}});
  unfused.forward({{"x", x}, {"t", t}});
  CHECK(train.output()[0] == infer.output()[0]);
  // no saved buffer without a backward (its gradients): the inference plan has none for the node
  const auto plan = infer.memory_plan({{"B", 2}, {"T", 5}});
  INFO(plan.str(8));
  for (const auto& e : plan.buffers) CHECK(e.what.find("saved for backward") == std::string::npos);
  bool train_saves = false;
  for (const auto& e : train.memory_plan({{"B", 2}, {"T", 5}}).buffers)
    train_saves = train_saves || (e.what.find("linear_cross_entropy") != std::string::npos &&
                                  e.what.find("saved for backward") != std::string::npos);
  CHECK(train_saves);
  CHECK(std::abs(infer.output()[0] - unfused.output()[0]) <= 1e-6f * std::abs(unfused.output()[0]));
  CHECK(infer.output()[0] > 0.5f);
}

TEST_CASE("with int8 weights, an inference executor's fused head reads them as the unfused product does") {
  forced_rows force(96);
  auto g = make_graph(cross_entropy(nn::linear<"head", V2>(X2{}), Target{}));
  auto p = g.make_params<float>(12);
  auto x = test::random_tensor<float>({4, 100, K2}, 13, -2, 2);
  tensor<std::int32_t> t(dims_t{4, 100});
  for (std::int64_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>((i * 31) % V2);
  float loss[3];
  int i = 0;
  for (auto [fuse, weights] : {std::pair{true, weight_precision::int8}, std::pair{false, weight_precision::int8},
                               std::pair{true, weight_precision::f32}}) {
    auto ex = g.executor<float>(p, {.inference = true, .fuse = fuse, .weights = weights});
    CHECK(ops_of(ex.plan()).count("linear_cross_entropy") == (fuse ? 1u : 0u));
    ex.forward({{"x", x}, {"t", t}});
    loss[i++] = ex.output()[0];
  }
  CHECK(loss[0] == loss[1]);  // the int8 product's logits, row by row alike
  CHECK(loss[0] != loss[2]);  // and not the float ones
  CHECK(std::abs(loss[0] - loss[2]) < 1e-2f * loss[2]);
}

TEST_CASE("linear_cross_entropy_force_rows refuses a negative count") {
  CHECK_THROWS_AS(ops::linear_cross_entropy_force_rows(-1), std::invalid_argument);
  CHECK(ops::linear_cross_entropy_forced_rows() == 0);
}

TEST_CASE("a tied decoder's loss fuses its head: the same training numbers as unfused") {
  constexpr nn::decoder_config C{.family = nn::decoder_family::gpt2, .d_model = 16, .heads = 2, .ffn = 32,
                                 .layers = 1, .vocab = 50, .max_positions = 16, .tied_embeddings = true};
  using M = nn::decoder_lm<C, nn::train_mode>;
  auto g = make_graph(M::loss());
  auto p = g.make_params<double>(6);
  tensor<std::int32_t> tokens(dims_t{2, 8}), next(dims_t{2, 8});
  for (std::int64_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 7 + 3) % C.vocab);
    next[i] = static_cast<std::int32_t>((i * 11 + 1) % C.vocab);
  }
  const executor<double> probe(g.plan(), p, {.fuse = true});
  CHECK(ops_of(probe.plan()).count("linear_cross_entropy") == 1);
  std::vector<double> losses[2];
  for (int fuse : {0, 1}) {
    auto ex = g.executor<double>(p, {.fuse = fuse == 1});
    ex.forward({{"tokens", tokens}, {"target", next}});
    losses[fuse].push_back(ex.output()[0]);
    ex.backward();
    for (auto& [name, e] : p) losses[fuse].insert(losses[fuse].end(), e.grad.values().begin(), e.grad.values().end());
  }
  CHECK(max_rel(losses[1], losses[0]) <= 1e-12);
}
