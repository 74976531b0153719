// precision_report: the float32 run of a graph against the same graph in double, per output and
// per gradient, with explicit bounds for attention, the Transformer and both example models; and
// the report catching precision that is lost.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "loom/loom.hpp"
#include "loom/nn/decoder.hpp"
#include "test_support.hpp"
#include "translation_batch.hpp"

using namespace loom;

namespace {

// float32 stores 24 significant bits: one rounding is 2^-24 ≈ 6e-8 of a value. Measured here:
// outputs within 8e-9 to 2.1e-7 of their scale, gradients within 6.8e-6 (the translation model's
// target embedding, whose rows sum over every position; the others' within 5.3e-7). The bounds leave about 7× of headroom
// and no more: a kernel that lost precision (a sum done in half the bits, a bf16 product where
// float was promised) fails them.
constexpr double output_bound = 2e-6, gradient_bound = 5e-5;

void require_within(const precision_result& r, double outputs, double gradients) {
  INFO(r.str());
  REQUIRE_FALSE(r.entries.empty());
  for (const auto& e : r.entries) {
    INFO(e.name);
    CHECK(e.relative <= (e.name.rfind("output", 0) == 0 ? outputs : gradients));
  }
}

using test::translation_batch;

}  // namespace

TEST_CASE("precision_report: multi-head self-attention with causal and padding masks, float against double") {
  constexpr long D = 16;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>();
  auto len = input<"len", shape<dyn<"B">>, int>();
  auto g = make_graph(nn::self_attention<"a", 4>(x, nn::causal, nn::padding(len)));
  auto p = g.make_params<double>(3);
  test::randomize(p, 4);
  const auto xs = test::random_tensor<double>({2, 24, D}, 5);
  const tensor<std::int32_t> ls({2}, {24, 17});
  const auto r = precision_report(g, p, {{"x", xs}, {"len", ls}});
  // the output, every parameter's gradient (q, k, v, out weights and biases) and the input's
  REQUIRE(r.entries.size() == 1 + p.names().size() + 1);
  require_within(r, output_bound, gradient_bound);
  CHECK(r.at("output 0").relative > 0);  // float is not double: the report measures something
}

TEST_CASE("precision_report: the translation model (encoder-decoder, its loss and every gradient), float against "
          "double") {
  constexpr auto cfg = translation::config<>;
  auto g = make_graph(nn::seq2seq<cfg, nn::eval_mode>::loss<translation::pad>());
  auto p = g.make_params<double>(1);
  const auto b = translation_batch();
  const auto r = precision_report(g, p, {{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}});
  require_within(r, output_bound, gradient_bound);
}

TEST_CASE("precision_report: a Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU) and its gradients, float against "
          "double") {
  constexpr nn::decoder_config c{.family = nn::decoder_family::llama, .d_model = 32, .heads = 4, .kv_heads = 2,
                                 .ffn = 48, .layers = 2, .vocab = 29, .eps = 1e-5};
  auto g = make_graph(nn::decoder_lm<c, nn::train_mode>::loss());
  auto p = g.make_params<double>(2);
  tensor<std::int32_t> tokens({2, 12}), target({2, 12});
  for (std::int64_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 7 + 3) % 29);
    target[i] = static_cast<std::int32_t>((i * 5 + 1) % 29);
  }
  const auto r = precision_report(g, p, {{"tokens", tokens}, {"target", target}});
  require_within(r, output_bound, gradient_bound);
}

TEST_CASE("precision_report: precision that float loses shows as a large relative error") {
  // (x + 1e8) − 1e8: in float, x's digits are gone (1e8 has a spacing of 8 in float)
  auto x = input<"x", shape<fix<4>>>();
  auto big = input<"big", shape<fix<1>>>();
  auto g = make_graph((x + big) - big);
  param_store<double> none;
  const tensor<double> xs({4}, {0.25, -1.5, 3.0, 0.1}), bs({1}, {1e8});
  const auto r = precision_report(g, none, {{"x", xs}, {"big", bs}}, {.gradients = false});
  REQUIRE(r.entries.size() == 1);
  CHECK(r.at("output 0").relative > 0.1);
  CHECK(r.worst_relative() == r.at("output 0").relative);
}

TEST_CASE("precision_report: bad input is a clear error") {
  auto x = input<"x", shape<fix<3>>>();
  auto w = param<"w", shape<fix<3>>>();
  auto g = make_graph(x * w);
  param_store<double> none;
  CHECK_THROWS_AS(precision_report(g, none, {{"x", tensor<double>({3})}}), missing_error);
  auto p = g.make_params<double>(1);
  CHECK_THROWS_WITH(precision_report(g, p, {{"x", tensor<float>({3})}}), Catch::Contains("double"));
  CHECK_THROWS_AS(precision_report(g, p, {{"x", tensor<double>({4})}}), shape_error);
  const auto r = precision_report(g, p, {{"x", tensor<double>({3}, {1, 2, 3})}});
  CHECK_THROWS_AS(r.at("no such entry"), missing_error);
}

TEST_CASE("precision_report: bf16 products (compute_precision::bf16) against double, with their own bounds") {
  constexpr auto cfg = translation::config<>;
  auto g = make_graph(nn::seq2seq<cfg, nn::eval_mode>::loss<translation::pad>());
  auto p = g.make_params<double>(1);
  const auto b = translation_batch();
  const std::initializer_list<feed> feeds{{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}};
  const auto f32 = precision_report(g, p, feeds);
  const auto bf16 = precision_report(g, p, feeds, {.precision = compute_precision::bf16});
  INFO(bf16.str());
  // bf16 keeps 8 significant bits (a relative rounding of 2^-9 ≈ 2e-3 per operand). Element by
  // element a gradient can be far off where a ReLU's input is near 0 (bf16 flips which side it
  // is on: up to 23% of the gradient's scale here), so the gradients are bounded norm-wise; the
  // loss element-wise. Measured at this initialisation: the loss 2.6e-4 off, the gradients
  // 2e-4 to 5.6e-2 norm-wise (the first encoder layer's projections and the FFNs' first layers,
  // behind ReLUs, the most)
  for (const auto& e : bf16.entries) {
    INFO(e.name);
    if (e.name.rfind("output", 0) == 0) CHECK(e.relative <= 2e-3);
    else CHECK(e.norm_relative <= 1e-1);
  }
  CHECK(bf16.at("output 0").relative > 0);
  CHECK(bf16.worst_norm_relative() > 10 * f32.worst_norm_relative());  // the bf16 path really ran
}

TEST_CASE("precision_report: bf16 products in attention and a Llama-style decoder, against double") {
  // as for the translation model above: the output element-wise, the gradients norm-wise
  // (bf16's 8 significant bits); each bound about five times what was measured
  auto check = [](const precision_result& bf16, double output_bound, double gradient_bound) {
    INFO(bf16.str());
    for (const auto& e : bf16.entries) {
      INFO(e.name);
      if (e.name.rfind("output", 0) == 0) CHECK(e.relative <= output_bound);
      else CHECK(e.norm_relative <= gradient_bound);
    }
    CHECK(bf16.at("output 0").relative > 1e-6);  // bf16's error, not float's (1e-8 to 2e-7 here)
  };
  SECTION("multi-head self-attention (its projections in bf16; the fused attention stays float)") {
    // measured: the output 4.6e-3, the gradients up to 5.8e-3 norm-wise (the out projection's
    // bias, which no bf16 product reaches, 1e-7)
    constexpr long D = 16;
    auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>();
    auto len = input<"len", shape<dyn<"B">>, int>();
    auto g = make_graph(nn::self_attention<"a", 4>(x, nn::causal, nn::padding(len)));
    auto p = g.make_params<double>(3);
    test::randomize(p, 4);
    const auto xs = test::random_tensor<double>({2, 24, D}, 5);
    const tensor<std::int32_t> ls({2}, {24, 17});
    check(precision_report(g, p, {{"x", xs}, {"len", ls}}, {.precision = compute_precision::bf16}), 2e-2, 3e-2);
  }
  SECTION("a Llama-style decoder's loss (RMSNorm, RoPE, GQA, SwiGLU)") {
    // measured: the loss 6.0e-6 (a mean over 24 tokens), the gradients 3e-3 to 6e-3 norm-wise
    constexpr nn::decoder_config c{.family = nn::decoder_family::llama, .d_model = 32, .heads = 4, .kv_heads = 2,
                                   .ffn = 48, .layers = 2, .vocab = 29, .eps = 1e-5};
    auto g = make_graph(nn::decoder_lm<c, nn::train_mode>::loss());
    auto p = g.make_params<double>(2);
    tensor<std::int32_t> tokens({2, 12}), target({2, 12});
    for (std::int64_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<std::int32_t>((i * 7 + 3) % 29);
      target[i] = static_cast<std::int32_t>((i * 5 + 1) % 29);
    }
    check(precision_report(g, p, {{"tokens", tokens}, {"target", target}}, {.precision = compute_precision::bf16}),
          1e-4, 3e-2);
  }
}

TEST_CASE("bf16 products give the same bits for any thread count, and a double executor refuses them") {
  constexpr auto cfg = translation::config<>;
  auto g = make_graph(nn::seq2seq<cfg, nn::eval_mode>::loss<translation::pad>());
  const auto b = translation_batch();
  auto run = [&](int threads) {
    auto p = g.make_params<float>(1);
    auto ex = g.executor<float>(p, {.threads = threads, .precision = compute_precision::bf16});
    ex.forward({{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}});
    ex.backward();
    std::vector<float> bits{ex.output()[0]};
    for (const auto& name : p.names())
      for (float v : p.grad(name).values()) bits.push_back(v);
    return bits;
  };
  const auto one = run(1);
  CHECK(std::memcmp(one.data(), run(2).data(), one.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(one.data(), run(4).data(), one.size() * sizeof(float)) == 0);
  auto p64 = g.make_params<double>(1);
  CHECK_THROWS_AS(g.executor<double>(p64, {.precision = compute_precision::bf16}), value_error);
}
