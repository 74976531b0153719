// The nn layers made of the ops (nn::embedding, nn::layer_norm, nn::feed_forward, nn::linear) and
// a small Transformer-style stack of them: names, initialisation, values, gradcheck, threads.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.hpp"
#include "loom/nn/layers.hpp"
#include "ops/op_test_support.hpp"
#include "support/corruption.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::decimals;

TEST_CASE("nn layers name their parameters as PyTorch does and initialise them like it") {
  auto tok = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
  auto x = nn::embedding<"embed", 1000, 8>(tok);
  auto y = nn::feed_forward<"layers.0", 16>(nn::layer_norm<"layers.0.norm1">(x));
  auto g = make_graph(y);
  auto p = g.make_params<double>(1);
  CHECK(p.names() == std::vector<std::string>{"embed.weight", "layers.0.linear1.bias", "layers.0.linear1.weight",
                                              "layers.0.linear2.bias", "layers.0.linear2.weight", "layers.0.norm1.bias",
                                              "layers.0.norm1.weight"});
  CHECK(p.value("embed.weight").dims() == dims_t{1000, 8});
  CHECK(p.value("layers.0.linear1.weight").dims() == dims_t{16, 8});
  CHECK(p.value("layers.0.linear1.bias").dims() == dims_t{16});
  CHECK(p.value("layers.0.linear2.weight").dims() == dims_t{8, 16});
  CHECK(p.value("layers.0.linear2.bias").dims() == dims_t{8});
  for (double v : p.value("layers.0.norm1.weight").values()) CHECK(v == 1.0);
  for (double v : p.value("layers.0.norm1.bias").values()) CHECK(v == 0.0);
  // nn.Embedding: N(0, 1); 8000 draws put the sample mean within 0.05 and the sd within 0.05 of 1
  double mean = 0, sq = 0;
  for (double v : p.value("embed.weight").values()) mean += v;
  mean /= 8000;
  for (double v : p.value("embed.weight").values()) sq += (v - mean) * (v - mean);
  CHECK(std::abs(mean) < 0.05);
  CHECK(std::sqrt(sq / 7999) == Approx(1.0).margin(0.05));
}

TEST_CASE("nn::feed_forward computes linear2(act(linear1(x))) as PyTorch") {
  auto x = input<"x", shape<fix<1>, dyn<"T">, fix<2>>>();
  param_store<double> p;
  p.set("ff.linear1.weight", tensor<double>({3, 2}, {0.1, 0.2, -0.3, 0.4, 0.5, -0.6}));
  p.set("ff.linear1.bias", tensor<double>({3}, {0.01, -0.02, 0.03}));
  p.set("ff.linear2.weight", tensor<double>({2, 3}, {0.7, -0.8, 0.9, -1.0, 1.1, 0.2}));
  p.set("ff.linear2.bias", tensor<double>({2}, {0.05, -0.05}));
  tensor<double> xs({1, 2, 2}, {0.5, -1.0, 2.0, 0.25});
  // PyTorch 1.13, float64: F.linear(act(F.linear(x, w1, b1)), w2, b2)
  SECTION("relu (worked by hand too: hidden [0, 0, 0.88] and [0.26, 0, 0.88])") {
    auto run = make_graph(nn::feed_forward<"ff", 3>(x)).executor<double>(p);
    run.forward({{"x", xs}});
    check_values(run.output(), {0.842, 0.126, 1.024, -0.134}, 1e-12);
  }
  SECTION("gelu") {
    auto run = make_graph(nn::feed_forward<"ff", 3, nn::gelu_t>(x)).executor<double>(p);
    run.forward({{"x", xs}});
    check_values(run.output(), {0.7780858891, -0.0234138783, 0.9270763336, -0.2364835112});
  }
}

TEST_CASE("nn::feed_forward with dropout is the plain one when not training and passes gradcheck") {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto seed = input<"seed", shape<fix<2>>, int>();
  auto with_dropout = make_graph(nn::feed_forward<"ff", 6, nn::gelu_t, 0.3>(x, seed));
  auto plain = make_graph(nn::feed_forward<"ff", 6, nn::gelu_t>(x));
  auto p = with_dropout.make_params<double>(2);
  auto xs = test::random_tensor<double>({2, 3, 4}, 18);
  auto a = with_dropout.executor<double>(p, {.training = false});
  auto b = plain.executor<double>(p);
  a.forward({{"x", xs}, {"seed", seed_of(1, 0)}});
  b.forward({{"x", xs}});
  CHECK(copy_of(a.output()) == copy_of(b.output()));
  test::randomize(p, 3);
  test::require_gradcheck(with_dropout, p, {{"x", xs}, {"seed", seed_of(1, 0)}});
}

namespace {
// A Transformer-style stack: embed, add positions, pre-norm feed-forward with dropout and a
// residual, a final norm, a projection to the vocabulary and the loss (target 0 is padding).
constexpr auto small_stack_loss() {
  constexpr long vocab = 7, model = 4;
  auto tokens = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
  auto targets = input<"target", shape<dyn<"B">, dyn<"T">>, int>();
  auto seed = input<"seed", shape<fix<2>>, int>();
  auto embedded = add_positional_encoding(nn::embedding<"embed", vocab, model>(tokens));  // [B, T, D]
  auto hidden = embedded + nn::feed_forward<"ff", 8, nn::gelu_t, 0.2>(nn::layer_norm<"norm1">(embedded), seed);
  auto logits = nn::linear<"out", vocab>(nn::layer_norm<"norm2">(hidden));  // [B, T, V]
  return cross_entropy<0, 0.1>(logits, targets);
}
}  // namespace

TEST_CASE("a small Transformer-style stack passes gradcheck end to end") {
  auto g = make_graph(small_stack_loss());
  auto p = g.make_params<double>(4);
  test::randomize(p, 5);
  tokens_t ts({2, 3}, {1, 6, 6, 2, 0, 0});
  tokens_t targets_fed({2, 3}, {6, 6, 3, 5, 0, 0});
  test::require_gradcheck(g, p, {{"tok", ts}, {"target", targets_fed}, {"seed", seed_of(9, 1)}});
}

TEST_CASE("gradcheck notices when the backward of any of these ops adds its gradient twice") {
  auto g = make_graph(small_stack_loss());
  auto p = g.make_params<double>(4);
  test::randomize(p, 5);
  tokens_t ts({2, 3}, {1, 6, 6, 2, 0, 0});
  tokens_t targets_fed({2, 3}, {6, 6, 3, 5, 0, 0});
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  auto y = input<"y", shape<fix<3>>>();
  auto relu_mul = make_graph(relu(x) * y);
  tensor<double> xs({2, 3}, {0.5, -1, 2, 1, 1.5, -0.5}), ys({3}, {0.3, -0.7, 1.1});
  const op_entry* in_stack[] = {&entry_of<embedding_op>, &entry_of<positional_encoding_def>, &entry_of<layer_norm_def>,
                                &entry_of<gelu_op>,      &entry_of<dropout_def>,             &entry_of<cross_entropy_def>};
  for (const op_entry* op : in_stack) {
    INFO(op->name);
    testing::scoped_corruption broken(*op, testing::corruption::run_twice);
    CHECK_FALSE(gradcheck(g, p, {{"tok", ts}, {"target", targets_fed}, {"seed", seed_of(9, 1)}}, {.fuse = 0}).ok);  // the primitives, unfused
  }
  for (const op_entry* op : {&entry_of<relu_op>, &entry_of<mul_op>}) {
    INFO(op->name);
    testing::scoped_corruption broken(*op, testing::corruption::run_twice);
    CHECK_FALSE(gradcheck(relu_mul, p, {{"x", xs}, {"y", ys}}).ok);
  }
  CHECK(gradcheck(relu_mul, p, {{"x", xs}, {"y", ys}}).ok);  // and the kernels are restored
}

TEST_CASE("the stack's loss and gradients are bit-identical for 1, 2 and 4 threads") {
  // large enough that embedding, layer_norm, mul and cross_entropy split into several chunks
  auto big_x = input<"x", shape<dyn<"B">, dyn<"T">, fix<256>>>();
  auto big_tok = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
  auto big_seed = input<"seed", shape<fix<2>>, int>();
  auto e = nn::embedding<"embed", 50, 256>(big_tok);
  auto n = nn::layer_norm<"norm">(dropout<0.1>(e, big_seed) * param<"gate", shape<fix<256>>, init<init_kind::ones>>());
  auto big_loss = cross_entropy<-100, 0.1>(mul(n, big_x), big_tok);
  auto g = make_graph(big_loss);
  rng gen(6);
  tokens_t ts({8, 128});
  for (auto& t : ts.values()) t = static_cast<std::int32_t>(gen.below(5)) * 10;  // few ids, many repeats
  auto xs = test::random_tensor<float>({8, 128, 256}, 7);
  auto run = [&](int threads) {
    auto p = g.make_params<float>(8);
    auto ex = g.executor<float>(p, {.threads = threads});
    ex.forward({{"x", xs}, {"tok", ts}, {"seed", seed_of(1, 1)}});
    ex.backward();
    std::vector<float> all{ex.output()[0]};
    for (auto& [name, entry] : p) all.insert(all.end(), entry.grad.values().begin(), entry.grad.values().end());
    return all;
  };
  const auto one = run(1);
  CHECK(test::same_bits(one, run(2)));
  CHECK(test::same_bits(one, run(4)));
}
