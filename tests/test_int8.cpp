// int8 weights (exec_options::weights = int8): the per-channel quantization (ops/int8_gemm.hpp)
// against its definition; the product against a reference written here from the header's
// definition (bit for bit) and against the float product (within the quantization's bound), for
// ragged shapes; the vector kernel against the portable loop, rows alone or together; the
// executor routing the fused linear and x · Wᵀ through it, with its errors; and the error of the
// quantized graphs against double (precision_report) for attention, the translation model and a
// Llama-style decoder, with explicit bounds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "../ops/int8_gemm.hpp"
#include "loom/loom.hpp"
#include "loom/nn/beam_search.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/kv_cache.hpp"
#include "loom/nn/transformer.hpp"
#include "test_support.hpp"
#include "precision_cases.hpp"

using namespace loom;
using i64 = std::int64_t;

namespace {

bool same(float a, float b) { return std::isnan(a) ? std::isnan(b) : std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

std::vector<float> random_floats(i64 n, std::uint64_t seed, float lo = -1, float hi = 1) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(gen);
  return v;
}

// The header's y[i, j], written here from its definition: qx and sx of the row, the exact
// integer sum, one rounding to float, times scale[j] · sx.
float reference_output(const float* x, i64 cols, const ops::int8_matrix& w, i64 j) {
  float largest = 0;
  for (i64 k = 0; k < cols; ++k) largest = std::max(largest, std::fabs(x[k]));
  const float sx = largest / 32767.f;
  std::int64_t s = 0;
  if (sx != 0)
    for (i64 k = 0; k < cols; ++k) {
      const float t = std::clamp(std::nearbyint(x[k] / sx), -32767.f, 32767.f);
      s += static_cast<std::int64_t>(t) * w.view().at(j, k);
    }
  return static_cast<float>(s) * (w.scale[static_cast<std::size_t>(j)] * sx);
}

// Which of int8_gemm's kernels a product runs on: the CPU's choice, the portable loop, AVX2's.
enum class kernel { chosen, portable, avx2 };

// y = x · (scale ∘ q)ᵀ through int8_gemm, x [m, ldx], y [m, ldy]. kernel::avx2 on a CPU
// without AVX2: y as the portable loop makes it (nothing to compare).
std::vector<float> product(i64 m, const std::vector<float>& x, i64 ldx, const ops::int8_matrix& w, i64 ldy,
                           kernel on = kernel::chosen) {
  std::vector<float> y(static_cast<std::size_t>(m * ldy), -7.f);  // what is not written stays -7
  if (on == kernel::portable || (on == kernel::avx2 && !ops::int8_gemm_avx2(m, x.data(), ldx, w.view(), y.data(), ldy)))
    ops::int8_gemm_portable(m, x.data(), ldx, w.view(), y.data(), ldy);
  else if (on == kernel::chosen) ops::int8_gemm(m, x.data(), ldx, w.view(), y.data(), ldy);
  return y;
}

// Whether this CPU runs int8_gemm's AVX2 kernel (else kernel::avx2 runs the portable loop).
bool avx2_kernel_here() {
  const std::vector<float> one{1.f};
  const auto q = ops::quantize_rows(one.data(), 1, 1, "w");
  float y = 0;
  return ops::int8_gemm_avx2(1, one.data(), 1, q.view(), &y, 1);
}

// The executor tests' graph: x [B, 40] → relu(nn::linear "l1", 24 outputs: a fused linear) →
// · W2ᵀ ("w2" [24, 24], no bias: matmul<false, true>), so both kinds of weight product; its
// parameters (seeded) and an input of 6 rows.
constexpr long in_dim = 40, out_dim = 24;
auto two_products() {
  auto x = input<"x", shape<dyn<"B">, fix<in_dim>>>();
  auto w2 = param<"w2", shape<fix<out_dim>, fix<out_dim>>>();
  return make_graph(matmul<false, true>(relu(nn::linear<"l1", out_dim>(x)), w2));
}
param_store<float> two_products_params() {
  auto p = two_products().make_params<float>(4);
  test::randomize(p, 5);
  return p;
}
const tensor<float> two_products_x = test::random_tensor<float>({6, in_dim}, 6);

// An executor's output 0 after forward() on two_products_x.
std::vector<float> forward_output(executor<float>& ex) {
  ex.forward({{"x", two_products_x}});
  const auto y = ex.output();
  return std::vector<float>(y.data, y.data + y.dims.size());
}

}  // namespace

TEST_CASE("int8: quantize_rows scales each row by its largest magnitude, rounds to nearest even, refuses NaN") {
  SECTION("a row of known values") {
    const std::vector<float> w{127, 2.5f, -2.5f, 3.5f, 0.49f, -127, 126.5f, 0};
    const auto q = ops::quantize_rows(w.data(), 1, 8, "w");
    REQUIRE(q.scale.at(0) == 1.f);
    const std::vector<int> want{127, 2, -2, 4, 0, -127, 126, 0};  // ties to even: 2.5 → 2, 3.5 → 4, 126.5 → 126
    for (int k = 0; k < 8; ++k) CHECK(int(q.view().at(0, k)) == want[static_cast<std::size_t>(k)]);
    CHECK(q.padded_cols == 64);
    CHECK(q.q.size() == 16 * 64);  // one block of 16 rows
    std::vector<int> nonzero;
    for (std::size_t e = 0; e < q.q.size(); ++e)
      if (q.q[e] != 0) nonzero.push_back(static_cast<int>(e));
    // the layout: column pairs of the block's 16 rows, 32 bytes a pair, row 0 at bytes 0 and 1
    CHECK(nonzero == std::vector<int>{0, 1, 32, 33, 65, 96});  // k 0, 1, 2, 3, 5, 6 (k 4 rounds to 0)
  }
  SECTION("random rows: each element within half a step, the largest at ±127; a row of zeros") {
    const i64 rows = 5, cols = 70;
    auto w = random_floats(rows * cols, 3, -3, 3);
    for (i64 k = 0; k < cols; ++k) w[static_cast<std::size_t>(2 * cols + k)] = 0;  // row 2: zeros
    const auto q = ops::quantize_rows(w.data(), rows, cols, "w");
    REQUIRE(q.padded_cols == 128);
    for (i64 j = 0; j < rows; ++j) {
      float largest = 0;
      for (i64 k = 0; k < cols; ++k) largest = std::max(largest, std::fabs(w[static_cast<std::size_t>(j * cols + k)]));
      const float s = q.scale[static_cast<std::size_t>(j)];
      CHECK(s == largest / 127.f);
      int extreme = 0;
      for (i64 k = 0; k < cols; ++k) {
        const int v = q.view().at(j, k);
        REQUIRE(std::abs(v) <= 127);
        extreme = std::max(extreme, std::abs(v));
        CHECK(std::fabs(double(w[static_cast<std::size_t>(j * cols + k)]) - double(s) * v) <= 0.5 * s * (1 + 1e-6));
      }
      CHECK(extreme == (j == 2 ? 0 : 127));
    }
    CHECK(q.scale[2] == 0);
  }
  SECTION("a NaN or an infinity is refused, naming the element") {
    std::vector<float> w(12, 1.f);
    w[7] = std::numeric_limits<float>::quiet_NaN();  // row 1, column 3
    CHECK_THROWS_AS(ops::quantize_rows(w.data(), 3, 4, "parameter \"w\""), value_error);
    CHECK_THROWS_WITH(ops::quantize_rows(w.data(), 3, 4, "parameter \"w\""), Catch::Contains("[1, 3]") && Catch::Contains("\"w\""));
    w[7] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_AS(ops::quantize_rows(w.data(), 3, 4, "w"), value_error);
  }
  SECTION("degenerate sizes") {
    const auto none = ops::quantize_rows(nullptr, 0, 5, "w");
    CHECK(none.q.empty());
    const std::vector<float> w(3, 1.f);
    const auto empty_rows = ops::quantize_rows(w.data(), 3, 0, "w");
    CHECK(empty_rows.scale == std::vector<float>(16, 0.f));  // rows padded to a block of 16
    std::vector<float> x(2, 1.f), y(6, -7.f);
    ops::int8_gemm(2, x.data(), 0, empty_rows.view(), y.data(), 3);  // no columns: every output 0
    CHECK(y == std::vector<float>(6, 0.f));
  }
}

TEST_CASE("int8: int8_gemm is the header's exact integer sum, and within the quantization's bound of float") {
  std::uint64_t seed = 10;
  for (i64 k : {1, 15, 16, 31, 33, 64, 100, 511, 512, 513, 1100})
    for (i64 n : {1, 3, 4, 5, 63, 65, 130})
      for (i64 m : {1, 2, 4, 5, 9}) {
        const i64 ldx = k + 3, ldy = n + 2;
        const auto w = random_floats(n * k, seed++);
        const auto x = random_floats(m * ldx, seed++, -2, 2);
        const auto q = ops::quantize_rows(w.data(), n, k, "w");
        const auto y = product(m, x, ldx, q, ldy);
        INFO("m " << m << ", n " << n << ", k " << k);
        for (i64 i = 0; i < m; ++i) {
          const float* xi = x.data() + i * ldx;
          float largest = 0;
          for (i64 c = 0; c < k; ++c) largest = std::max(largest, std::fabs(xi[c]));
          for (i64 j = 0; j < n; ++j) {
            const float got = y[static_cast<std::size_t>(i * ldy + j)];
            REQUIRE(same(got, reference_output(xi, k, q, j)));
            // against the float weights and x: each weight within scale/2, each x within sx/2,
            // and the float roundings of the two scales and of the sum
            double exact = 0, bound = 0;
            const double s = q.scale[static_cast<std::size_t>(j)], sx = largest / 32767.0;
            for (i64 c = 0; c < k; ++c) {
              const double wv = w[static_cast<std::size_t>(j * k + c)];
              exact += double(xi[c]) * wv;
              bound += std::fabs(xi[c]) * s / 2 + (std::fabs(wv) + s / 2) * sx / 2;
            }
            REQUIRE(std::fabs(got - exact) <= bound * (1 + 1e-5) + 1e-6 * std::fabs(exact));
          }
          for (i64 j = n; j < ldy; ++j) REQUIRE(y[static_cast<std::size_t>(i * ldy + j)] == -7.f);  // not written
        }
      }
}

// The CPU's kernel (AVX512_VNNI's, AVX2's or the portable loop) and AVX2's, each against the
// portable loop.
TEST_CASE("int8: the vector kernels and the portable loop give the same bits, rows alone or together") {
  INFO("the CPU's kernel: " << ops::int8_gemm_kernel());
  if (!avx2_kernel_here()) WARN("no AVX2 here: the AVX2 kernel's comparisons below compare the portable loop with itself");
  for (i64 k : {7, 64, 300, 1537}) {
    const i64 n = 37, m = 11;
    auto w = random_floats(n * k, 50 + k, -1, 1);
    w[5] = 1e30f;  // one row with a huge weight: the others quantize to small integers
    auto x = random_floats(m * k, 60 + k, -1e3f, 1e3f);
    x[static_cast<std::size_t>(3 * k + 1)] = 1e-30f;
    for (i64 c = 0; c < k; ++c) x[static_cast<std::size_t>(4 * k + c)] = 0;                   // a row of zeros
    x[static_cast<std::size_t>(6 * k + k / 2)] = std::numeric_limits<float>::infinity();      // rows that are not
    x[static_cast<std::size_t>(8 * k)] = std::numeric_limits<float>::quiet_NaN();            // finite
    const auto q = ops::quantize_rows(w.data(), n, k, "w");
    const auto together = product(m, x, k, q, n);
    const auto portable = product(m, x, k, q, n, kernel::portable);
    const auto avx2 = product(m, x, k, q, n, kernel::avx2);
    for (i64 e = 0; e < m * n; ++e) {
      REQUIRE(same(together[static_cast<std::size_t>(e)], portable[static_cast<std::size_t>(e)]));
      REQUIRE(same(avx2[static_cast<std::size_t>(e)], portable[static_cast<std::size_t>(e)]));
    }
    for (i64 i = 0; i < m; ++i) {  // row by row (the AVX2 kernel's tiles of one row, not two)
      std::vector<float> xi(x.begin() + i * k, x.begin() + (i + 1) * k);
      const auto alone = product(1, xi, k, q, n);
      const auto alone_avx2 = product(1, xi, k, q, n, kernel::avx2);
      for (i64 j = 0; j < n; ++j) {
        REQUIRE(same(alone[static_cast<std::size_t>(j)], together[static_cast<std::size_t>(i * n + j)]));
        REQUIRE(same(alone_avx2[static_cast<std::size_t>(j)], together[static_cast<std::size_t>(i * n + j)]));
      }
    }
    for (i64 j = 0; j < n; ++j) {
      CHECK(together[static_cast<std::size_t>(4 * n + j)] == 0.f);      // zeros in, zeros out
      CHECK_FALSE(std::isfinite(together[static_cast<std::size_t>(8 * n + j)]));  // the NaN carries
    }
    // the infinity carries through every channel whose weight at that column is not zero
    const i64 c = k / 2;
    for (i64 j = 0; j < n; ++j)
      if (q.view().at(j, c) != 0) CHECK_FALSE(std::isfinite(together[static_cast<std::size_t>(6 * n + j)]));
  }
}

TEST_CASE("int8: the largest products over many columns do not overflow") {
  // every weight at 127 and every x at 32767 after quantization: S = k · 127 · 32767, exactly
  for (i64 k : {512, 1024 + 32, 4096 + 7}) {
    const std::vector<float> w(static_cast<std::size_t>(2 * k), -0.5f);
    const std::vector<float> x(static_cast<std::size_t>(k), 3.f);
    const auto q = ops::quantize_rows(w.data(), 2, k, "w");
    const float want = static_cast<float>(-k * 127 * 32767LL) * (q.scale[0] * (3.f / 32767.f));
    for (kernel on : {kernel::chosen, kernel::avx2, kernel::portable}) {
      const auto y = product(1, x, k, q, 2, on);
      CHECK(same(y[0], want));
      CHECK(std::fabs(y[0] - (-1.5 * k)) <= 1e-5 * 1.5 * k);
    }
  }
}

TEST_CASE("int8: an executor with weights = int8 reads the fused linear's and x · Wᵀ's weights in int8") {
  auto g = two_products();
  auto params = two_products_params();
  const exec_options int8{.inference = true, .weights = weight_precision::int8};

  // the reference: the two products through int8_gemm directly, with the bias and relu between
  auto expected = [&](const param_store<float>& p) {
    const auto q1 = ops::quantize_rows(p.value("l1.weight").data(), out_dim, in_dim, "l1.weight");
    const auto q2 = ops::quantize_rows(p.value("w2").data(), out_dim, out_dim, "w2");
    const std::vector<float> xv(two_products_x.data(), two_products_x.data() + two_products_x.size());
    auto y1 = product(6, xv, in_dim, q1, out_dim);
    const float* b = p.value("l1.bias").data();
    for (i64 e = 0; e < 6 * out_dim; ++e) y1[static_cast<std::size_t>(e)] = std::max(y1[static_cast<std::size_t>(e)] + b[e % out_dim], 0.f);
    return product(6, y1, out_dim, q2, out_dim);
  };
  const auto want = expected(params);
  for (int threads : {1, 2, 4}) {
    exec_options o = int8;
    o.threads = threads;
    auto ex = g.executor<float>(params, o);
    REQUIRE(test::same_bits(forward_output(ex), want));
  }
  // and it is not the float graph: the float executor differs somewhere, by less than 5%
  auto fl = g.executor<float>(params, {.inference = true});
  const auto f32 = forward_output(fl);
  double diff = 0, scale = 0;
  for (std::size_t e = 0; e < want.size(); ++e) {
    diff = std::max(diff, double(std::fabs(f32[e] - want[e])));
    scale = std::max(scale, double(std::fabs(f32[e])));
  }
  CHECK(diff > 0);
  CHECK(diff < 0.05 * scale);

  SECTION("new values: written in place, quantized again after requantize(); a new layout, by itself") {
    auto ex = g.executor<float>(params, int8);
    const auto before = forward_output(ex);
    params.set("w2", test::random_tensor<float>({out_dim, out_dim}, 9));  // the same shape: written in place
    CHECK(test::same_bits(forward_output(ex), before));  // as documented
    ex.requantize();
    const auto now = expected(params);
    CHECK(test::same_bits(forward_output(ex), now));
    param_store<float> other = params;  // a whole store assigned: a layout change
    other.value("l1.weight").data()[0] = 3.f;
    params = other;
    const auto after = expected(params);
    CHECK(test::same_bits(forward_output(ex), after));
    CHECK_FALSE(test::same_bits(after, now));
  }
  SECTION("errors: training, double, a weight that is not finite") {
    CHECK_THROWS_WITH(g.executor<float>(params, {.weights = weight_precision::int8}), Catch::Contains("inference"));
    auto p64 = g.make_params<double>(4);
    CHECK_THROWS_AS(g.executor<double>(p64, int8), value_error);
    params.value("w2").data()[3] = std::numeric_limits<float>::quiet_NaN();
    auto ex = g.executor<float>(params, int8);
    CHECK_THROWS_WITH(forward_output(ex), Catch::Contains("\"w2\"") && Catch::Contains("finite"));
    params.value("w2").data()[3] = 0.25f;  // in place: the executor quantized nothing yet, so it sees it
    CHECK(std::isfinite(forward_output(ex)[0]));
  }
}

TEST_CASE("int8: precision_report of the quantized graphs against double, with explicit bounds") {
  // int8 weights keep 8 bits of each row (a step of 1/127 of its largest magnitude). Measured at
  // these initialisations (relative to each output's largest magnitude): attention 6.4e-3, the
  // translation model's loss 6.2e-4, the Llama-style decoder's loss 2.4e-5, the language model
  // of examples/charlm's loss 5.3e-5; the bounds leave 3-5× of headroom
  const precision_options int8{.gradients = false, .weights = weight_precision::int8};
  const auto attention = test::attention_report(int8);
  INFO(attention.str());
  CHECK(attention.at("output 0").relative <= 2e-2);
  CHECK(attention.at("output 0").relative > 10 * test::attention_report({.gradients = false}).at("output 0").relative);
  const auto translation = test::translation_report(int8);
  INFO(translation.str());
  CHECK(translation.at("output 0").relative <= 3e-3);
  // the decoders' losses: each within its bound, and far from float's own error (int8 ran)
  using report_fn = precision_result (*)(precision_options);
  for (const auto& [report, bound] : {std::pair<report_fn, double>{test::llama_report, 1e-4},
                                      std::pair<report_fn, double>{test::language_model_report, 2e-4}}) {
    const auto r = report(int8);
    INFO(r.str());
    CHECK(r.at("output 0").relative <= bound);
    CHECK(r.at("output 0").relative > 10 * report({.gradients = false}).at("output 0").relative);
  }
  // gradients are refused: int8 executors are inference-only
  CHECK_THROWS_WITH(test::attention_report({.weights = weight_precision::int8}), Catch::Contains("gradients = false"));
}

TEST_CASE("int8: nn::generate and nn::beam_search take the int8 step unchanged, and the first token agrees with float") {
  constexpr nn::transformer_config cfg{.d_model = 64, .heads = 4, .ffn = 128, .decoder_layers = 2, .tgt_vocab = 50};
  using step_model = nn::language_model<cfg, nn::decode_mode>;
  auto step = make_graph(step_model::logits());
  auto params = make_graph(nn::language_model<cfg, nn::eval_mode>::logits()).make_params<float>(7);
  auto f32 = step.executor<float>(params, {.inference = true});
  auto i8 = step.executor<float>(params, {.inference = true, .weights = weight_precision::int8});
  const std::vector<std::vector<int>> prompts{{1, 5, 9, 2}, {3, 3}};
  nn::kv_cache<float> c1(step, 2, 40), c2(step, 2, 40);
  const auto a = nn::generate(f32, c1, prompts, {.max_new_tokens = 30});
  const auto b = nn::generate(i8, c2, prompts, {.max_new_tokens = 30});
  REQUIRE(b.tokens.size() == 2);
  for (const auto& seq : b.tokens) {
    REQUIRE(seq.size() == 30);
    for (int t : seq) REQUIRE((t >= 0 && t < cfg.tgt_vocab));
  }
  CHECK(a.tokens[0][0] == b.tokens[0][0]);  // the first greedy token agrees (margins at init are not tiny)

  // beam search takes it unchanged too: a cache of beam rows per prompt
  nn::kv_cache<float> c3(step, 4, 40);
  const auto beams = nn::beam_search(i8, c3, prompts, {.beam = 2, .max_new_tokens = 12});
  REQUIRE(beams.hypotheses.size() == 2);
  for (const auto& h : beams.hypotheses) {
    REQUIRE(h.size() == 2);
    for (int t : h[0].tokens) REQUIRE((t >= 0 && t < cfg.tgt_vocab));
    CHECK(std::isfinite(h[0].log_prob));
  }
}

TEST_CASE("int8 and bf16: exec_options::float_weights keeps the named weights' products in float32") {
  auto g = two_products();
  auto params = two_products_params();
  auto out = [&](exec_options o) {
    o.inference = true;
    auto ex = g.executor<float>(params, o);
    return forward_output(ex);
  };
  const auto f32 = out({});
  const auto int8 = out({.weights = weight_precision::int8});
  const auto bf16 = out({.precision = compute_precision::bf16});
  const std::vector<std::string> both{"l1.weight", "w2"};
  // every weight named: the float32 graph, bit for bit
  CHECK(test::same_bits(out({.weights = weight_precision::int8, .float_weights = both}), f32));
  CHECK(test::same_bits(out({.precision = compute_precision::bf16, .float_weights = both}), f32));
  // one named: neither the float32 graph nor the all-int8 (all-bf16) one
  const auto int8_w2 = out({.weights = weight_precision::int8, .float_weights = {"w2"}});
  CHECK_FALSE(test::same_bits(int8_w2, f32));
  CHECK_FALSE(test::same_bits(int8_w2, int8));
  const auto bf16_w2 = out({.precision = compute_precision::bf16, .float_weights = {"w2"}});
  CHECK_FALSE(test::same_bits(bf16_w2, f32));
  CHECK_FALSE(test::same_bits(bf16_w2, bf16));
  // names that are not weights of a product: refused
  CHECK_THROWS_WITH(out({.weights = weight_precision::int8, .float_weights = {"l1.bias"}}), Catch::Contains("\"l1.bias\""));
  CHECK_THROWS_AS(out({.float_weights = {"no.such.weight"}}), value_error);
}
