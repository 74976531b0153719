// precision_report: the float32 run of a graph against the same graph in double, per output and
// per gradient, with explicit bounds for attention, the Transformer and both example models; and
// the report catching precision that is lost.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <span>
#include <vector>

#include "loom/loom.hpp"
#include "precision_cases.hpp"
#include "test_support.hpp"

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

// bf16 keeps 8 significant bits (a relative rounding of 2^-9 ≈ 2e-3 per operand). Element by
// element a gradient can be far off where a ReLU's input is near 0 (bf16 flips which side it is
// on), so bf16's gradients are bounded norm-wise and its outputs element-wise; and the output
// must be off by more than float's error (1e-8 to 2e-7 in these graphs): the bf16 path ran.
void require_bf16_within(const precision_result& bf16, double outputs, double gradients) {
  INFO(bf16.str());
  REQUIRE_FALSE(bf16.entries.empty());
  for (const auto& e : bf16.entries) {
    INFO(e.name);
    if (e.name.rfind("output", 0) == 0) CHECK(e.relative <= outputs);
    else CHECK(e.norm_relative <= gradients);
  }
  CHECK(bf16.at("output 0").relative > 1e-6);
}

using test::translation_batch;

}  // namespace

TEST_CASE("precision_report: multi-head self-attention with causal and padding masks, float against double") {
  const auto r = test::attention_report();
  // the output, every parameter's gradient (q, k, v, out weights and biases) and the input's
  for (const char* name : {"output 0", "grad param \"a.in_proj_weight\"", "grad param \"a.in_proj_bias\"",
                           "grad param \"a.out_proj.weight\"", "grad param \"a.out_proj.bias\"", "grad input \"x\""})
    CHECK_NOTHROW(r.at(name));
  CHECK(r.entries.size() == 6);
  require_within(r, output_bound, gradient_bound);
  CHECK(r.at("output 0").relative > 0);  // float is not double: the report measures something
}

TEST_CASE("precision_report: the translation model (encoder-decoder, its loss and every gradient), float against "
          "double") {
  require_within(test::translation_report(), output_bound, gradient_bound);
}

TEST_CASE("precision_report: a Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU) and its gradients, float against "
          "double") {
  require_within(test::llama_report(), output_bound, gradient_bound);
}

TEST_CASE("precision_report: the language model of examples/charlm and generate (GPT-like) and its gradients, float "
          "against double") {
  require_within(test::language_model_report(), output_bound, gradient_bound);
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
  // Measured (outputs and most gradients about five times under their bounds, or more):
  //  - the translation model's loss 2.6e-4, its gradients 2e-4 to 5.6e-2 norm-wise (the first
  //    encoder layer's projections and the FFNs' first layers, behind ReLUs, the most; element
  //    by element up to 23% of a gradient's scale);
  //  - attention (its projections in bf16, the fused attention float): the output 4.6e-3, the
  //    gradients up to 5.8e-3 (the out projection's bias, which no bf16 product reaches, 1e-7);
  //  - the Llama-style decoder's loss 6.0e-6 (a mean over 24 tokens), its gradients 3e-3 to 6e-3;
  //  - the language model of examples/charlm (40 keys: its attention's products bf16 too): the
  //    loss 7.1e-5 (float: 1.8e-8), its gradients up to 7.7e-2 norm-wise (layer 0's first FFN
  //    bias, behind its ReLU, where bf16 moves inputs near 0 to the other side; element by
  //    element up to 17%; 5.9e-2 on other tokens). Those behind ReLUs are the gradients with
  //    the least headroom: the translation model's 5.6e-2 against 1e-1, this one's against 2e-1.
  const precision_options bf16{.precision = compute_precision::bf16};
  const auto translation = test::translation_report(bf16);
  require_bf16_within(translation, 2e-3, 1e-1);
  CHECK(translation.worst_norm_relative() > 10 * test::translation_report().worst_norm_relative());
  require_bf16_within(test::attention_report(bf16), 2e-2, 3e-2);
  require_bf16_within(test::llama_report(bf16), 1e-4, 3e-2);
  require_bf16_within(test::language_model_report(bf16), 5e-4, 2e-1);
}

// Fused attention's blocked kernels (more than 32 keys): causal and padding masks over 300 keys,
// so that the online softmax spans two key blocks and the rows three query blocks.
precision_result blocked_attention_report(precision_options options = {}) {
  auto q = input<"q", shape<dyn<"B">, fix<2>, dyn<"T">, fix<16>>>();
  auto k = input<"k", shape<dyn<"B">, fix<2>, dyn<"T">, fix<16>>>();
  auto v = input<"v", shape<dyn<"B">, fix<2>, dyn<"T">, fix<16>>>();
  auto len = input<"len", shape<dyn<"B">>, int>();
  auto g = make_graph(nn::attention<{.is_causal = true}>(q, k, v, nn::padding(len)));
  param_store<double> none;
  return precision_report(g, none,
                          {{"q", test::random_tensor<double>({2, 2, 300, 16}, 21)},
                           {"k", test::random_tensor<double>({2, 2, 300, 16}, 22)},
                           {"v", test::random_tensor<double>({2, 2, 300, 16}, 23)},
                           {"len", tensor<std::int32_t>({2}, {300, 171})}},
                          options);
}

TEST_CASE("bf16 fused attention (the blocked kernels: its products in bf16) against double, with bounds") {
  // Measured: the output 2.6e-3 (float: 1.1e-7), the gradients of q, k and v 2.2e-3 to 3.4e-3
  // norm-wise (float: 2.5e-7 to 3.1e-7).
  const auto f32 = blocked_attention_report();
  require_within(f32, output_bound, gradient_bound);
  const auto bf16 = blocked_attention_report({.precision = compute_precision::bf16});
  require_bf16_within(bf16, 2e-2, 3e-2);
  CHECK(bf16.entries.size() == 4);  // the output and three input gradients
  CHECK(bf16.worst_norm_relative() > 100 * f32.worst_norm_relative());  // the products really were bf16
}

// Graph g run in bf16 (forward, then backward) at 1, 2 and 4 threads over parameters made with
// `seed` (none when the graph has none) and `feeds`: the output, the named inputs' gradients and
// every parameter's gradient must be the same bits at every thread count.
template <class Graph>
void require_same_bits_at_any_thread_count(const Graph& g, std::uint64_t seed, std::initializer_list<feed> feeds,
                                           std::initializer_list<const char*> inputs) {
  auto bits = [&](int threads) {
    auto p = g.template make_params<float>(seed);
    auto ex = g.template executor<float>(
        p, {.threads = threads, .input_grads = inputs.size() > 0, .precision = compute_precision::bf16});
    ex.forward(std::span<const feed>(feeds.begin(), feeds.size()));
    ex.backward();
    std::vector<float> out{ex.output()[0]};
    for (const char* name : inputs)
      for (float v : ex.input_grad(name).values()) out.push_back(v);
    for (const auto& name : p.names())
      for (float v : p.grad(name).values()) out.push_back(v);
    return out;
  };
  const auto one = bits(1);
  CHECK(std::memcmp(one.data(), bits(2).data(), one.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(one.data(), bits(4).data(), one.size() * sizeof(float)) == 0);
}

TEST_CASE("bf16 products give the same bits for any thread count, and a double executor refuses them") {
  constexpr auto cfg = translation::config<>;
  auto g = make_graph(nn::seq2seq<cfg, nn::eval_mode>::loss<translation::pad>());
  const auto b = translation_batch();
  require_same_bits_at_any_thread_count(
      g, 1, {{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}}, {});
  // fused attention's blocked kernels (300 keys), forward and backward
  auto q = input<"q", shape<dyn<"B">, fix<2>, dyn<"T">, fix<16>>>();
  auto k = input<"k", shape<dyn<"B">, fix<2>, dyn<"T">, fix<16>>>();
  auto v = input<"v", shape<dyn<"B">, fix<2>, dyn<"T">, fix<16>>>();
  require_same_bits_at_any_thread_count(make_graph(sum(nn::attention<{.is_causal = true}>(q, k, v))), 1,
                                        {{"q", test::random_tensor<float>({2, 2, 300, 16}, 31)},
                                         {"k", test::random_tensor<float>({2, 2, 300, 16}, 32)},
                                         {"v", test::random_tensor<float>({2, 2, 300, 16}, 33)}},
                                        {"q", "k", "v"});
  // layers whose products split into many row items sharing one packed weight (600 rows of
  // 256 × 256: items of 32 rows), forward and backward
  auto x = input<"x", shape<dyn<"B">, fix<256>>>();
  auto w2 = param<"w2", shape<fix<256>, fix<256>>>();
  require_same_bits_at_any_thread_count(make_graph(sum(matmul<false, true>(relu(nn::linear<"l1", 256>(x)), w2))), 5,
                                        {{"x", test::random_tensor<float>({600, 256}, 34)}}, {"x"});
  auto p64 = g.make_params<double>(1);
  CHECK_THROWS_AS(g.executor<double>(p64, {.precision = compute_precision::bf16}), value_error);
}
