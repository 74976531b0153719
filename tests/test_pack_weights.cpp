// exec_options::pack_weights: an inference executor whose weight products keep their weights
// packed for the GEMM from one forward() to the next. The results must be the bits of the same
// executor without it, for any number of rows (one row: the GEMV, which reads the weight as it
// is; a few rows in column blocks; many rows in row chunks) and threads; the copy must be made
// again when the store's layout changes or after requantize(), and (as documented) not before.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "loom/loom.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/kv_cache.hpp"
#include "loom/nn/transformer.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

// sizes at which 16 rows split every product into column blocks, and 700 rows into row chunks
constexpr long in_dim = 128, hidden = 320, out_dim = 1024;

// every kind of weight product the fused linear runs (relu, none, a residual) and x · Wᵀ
auto products() {
  auto x = input<"x", shape<dyn<"B">, fix<in_dim>>>();
  auto h = relu(nn::linear<"up", hidden>(x));
  auto d = nn::linear<"down", in_dim>(h) + x;  // the residual, in the GEMM's epilogue
  auto w = param<"w", shape<fix<out_dim>, fix<in_dim>>>();
  return make_graph(matmul<false, true>(nn::linear<"mid", in_dim>(d), w));
}

param_store<float> products_params() {
  auto p = products().make_params<float>(3);
  test::randomize(p, 8);
  return p;
}

std::vector<float> run(executor<float>& ex, const tensor<float>& x) {
  ex.forward({{"x", x}});
  const auto y = ex.output();
  return std::vector<float>(y.data, y.data + y.dims.size());
}

}  // namespace

TEST_CASE("pack_weights: every weight product gives the bits of the executor without it, call after call") {
  auto g = products();
  auto params = products_params();
  // 1 row (GEMV), 2 and 8 rows (one piece), 16 rows (column blocks), 700 rows (row chunks)
  for (const std::int64_t rows : {1, 2, 8, 16, 700}) {
    const auto x = test::random_tensor<float>({rows, in_dim}, 100 + static_cast<std::uint64_t>(rows));
    for (const int threads : {1, 2, 4}) {
      auto plain = g.executor<float>(params, {.threads = threads, .inference = true});
      auto packed = g.executor<float>(params, {.threads = threads, .inference = true, .pack_weights = true});
      const auto want = run(plain, x);
      INFO("rows " << rows << " threads " << threads);
      CHECK(test::same_bits(run(packed, x), want));  // the first call packs
      CHECK(test::same_bits(run(packed, x), want));  // later calls read what it kept
    }
  }
  // one executor over several row counts in turn (what decoding does: a prompt, then steps)
  auto packed = g.executor<float>(params, {.inference = true, .pack_weights = true});
  auto plain = g.executor<float>(params, {.inference = true});
  for (const std::int64_t rows : {16, 1, 3, 700, 8}) {
    const auto x = test::random_tensor<float>({rows, in_dim}, 200 + static_cast<std::uint64_t>(rows));
    INFO("rows " << rows);
    CHECK(test::same_bits(run(packed, x), run(plain, x)));
  }
}

TEST_CASE("pack_weights: values written in place are seen after requantize(), a new layout by itself") {
  auto g = products();
  // every weight written in place: an output that stays the same shows that every product of
  // the pass (one piece, column blocks, row chunks) read a kept copy
  const char* weights[] = {"up.weight", "down.weight", "mid.weight", "w"};
  for (const std::int64_t rows : {8, 16, 700}) {
    auto params = products_params();
    const auto x = test::random_tensor<float>({rows, in_dim}, 5);
    auto packed = g.executor<float>(params, {.threads = 2, .inference = true, .pack_weights = true});
    const auto before = run(packed, x);
    std::uint64_t seed = 9;
    for (const char* name : weights) params.set(name, test::random_tensor<float>(params.value(name).dims(), seed++));
    auto fresh = [&] {
      auto plain = g.executor<float>(params, {.inference = true});
      return run(plain, x);
    };
    const auto now = fresh();
    INFO("rows " << rows);
    REQUIRE_FALSE(test::same_bits(now, before));
    CHECK(test::same_bits(run(packed, x), before));  // as documented: the kept copies until requantize()
    packed.requantize();
    CHECK(test::same_bits(run(packed, x), now));

    param_store<float> other = params;  // a whole store assigned: a layout change
    other.value("up.weight").data()[0] = 3.f;
    params = other;
    const auto after = fresh();
    CHECK_FALSE(test::same_bits(after, now));
    CHECK(test::same_bits(run(packed, x), after));
  }
}

TEST_CASE("pack_weights: refused for training, and nothing changes for an executor in double") {
  auto g = products();
  auto params = products_params();
  CHECK_THROWS_WITH(g.executor<float>(params, {.pack_weights = true}), Catch::Contains("inference"));
  auto p64 = g.make_params<double>(3);
  test::randomize(p64, 8);
  const auto x = test::random_tensor<double>({8, in_dim}, 5);
  auto plain = g.executor<double>(p64, {.inference = true});
  auto packed = g.executor<double>(p64, {.inference = true, .pack_weights = true});
  plain.forward({{"x", x}});
  packed.forward({{"x", x}});
  const auto a = plain.output(), b = packed.output();
  CHECK(test::same_bits(std::vector<double>(a.data, a.data + a.dims.size()),
                        std::vector<double>(b.data, b.data + b.dims.size())));
}

TEST_CASE("pack_weights: nn::generate decodes 8 sequences to the same tokens, at 1 and 2 threads") {
  constexpr nn::transformer_config cfg{.d_model = 64, .heads = 4, .ffn = 256, .decoder_layers = 2, .tgt_vocab = 50};
  using step_model = nn::language_model<cfg, nn::decode_mode>;
  auto step = make_graph(step_model::logits());
  auto params = make_graph(nn::language_model<cfg, nn::eval_mode>::logits()).make_params<float>(7);
  std::vector<std::vector<int>> prompts;
  for (int s = 0; s < 8; ++s) prompts.push_back({1 + s, 5, 9 + s, 2});
  for (const int threads : {1, 2}) {
    auto plain = step.executor<float>(params, {.threads = threads, .inference = true});
    auto packed = step.executor<float>(params, {.threads = threads, .inference = true, .pack_weights = true});
    nn::kv_cache<float> c1(step, 8, 40), c2(step, 8, 40);
    const auto a = nn::generate(plain, c1, prompts, {.max_new_tokens = 24});
    const auto b = nn::generate(packed, c2, prompts, {.max_new_tokens = 24});
    REQUIRE(a.tokens.size() == 8);
    CHECK(a.tokens == b.tokens);
  }
}
