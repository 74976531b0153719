// Misuse of the public API and edge cases found by probing: each is refused with a clear
// error (or computed correctly), never undefined behaviour. The smallest reproducer of each.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

#include "../ops/blas.hpp"
#include "loom/loom.hpp"
#include "loom/nn/beam_search.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/linear.hpp"
#include "loom/nn/transformer.hpp"
#include "test_support.hpp"

using namespace loom;
using test::message_of;

namespace {
constexpr nn::transformer_config lm{.d_model = 16, .heads = 2, .ffn = 32, .decoder_layers = 2, .tgt_vocab = 13};
constexpr nn::transformer_config s2s{.d_model = 16, .heads = 2, .ffn = 32, .encoder_layers = 1, .decoder_layers = 1,
                                     .src_vocab = 11, .tgt_vocab = 13};
}  // namespace

// ---- empty batches and empty sequences ----

TEST_CASE("a batch of 0 through a linear layer gives an empty output and zero weight gradients") {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto g = make_graph(sum(nn::linear<"out", 3>(x)));
  auto params = g.make_params<float>(1);
  auto run = g.executor<float>(params);
  tensor<float> empty(dims_t{0, 5, 4});
  run.forward({{"x", empty}});
  CHECK(run.output()[0] == 0.0f);  // a sum over nothing
  run.backward();
  for (const char* name : {"out.weight", "out.bias"})
    for (float v : params.grad(name).values()) CHECK(v == 0.0f);  // the gradient of an empty sum
}

TEST_CASE("a batch of 0 through a language model gives logits of shape [0, T, V]") {
  auto g = make_graph(nn::language_model<lm, nn::eval_mode>::logits());
  auto params = g.make_params<float>(2);
  auto run = g.executor<float>(params, {.inference = true});
  tensor<std::int32_t> tokens(dims_t{0, 7});
  run.forward({{"tokens", tokens}});
  CHECK(run.output().dims == dims_t{0, 7, 13});
}

TEST_CASE("a batch of 0 through the encoder-decoder trains: loss 0, zero gradients") {
  auto g = make_graph(nn::seq2seq<s2s, nn::train_mode>::loss<0, 0.1>());
  auto params = g.make_params<float>(3);
  auto run = g.executor<float>(params);
  tensor<std::int32_t> src(dims_t{0, 6}), src_len(dims_t{0}), tgt(dims_t{0, 5}), target(dims_t{0, 5});
  run.forward({{"src", src}, {"src_len", src_len}, {"tgt", tgt}, {"target", target}});
  CHECK(run.output()[0] == 0.0f);  // cross-entropy over no tokens is defined as 0
  run.backward();
  for (const auto& [name, e] : params)
    for (float v : e.grad.values()) REQUIRE(v == 0.0f);
}

TEST_CASE("a source of length 0 masks every key of a padding mask without dividing by zero") {
  // scores [B, T, S] with S = 0: every row is empty, the output too
  auto scores = input<"scores", shape<dyn<"B">, dyn<"T">, dyn<"S">>>();
  auto len = input<"len", shape<dyn<"B">>, int>();
  auto g = make_graph(sum(mask_padding(scores, len)));
  param_store<double> p;
  auto run = g.executor<double>(p, {.input_grads = true});
  tensor<double> s(dims_t{2, 3, 0});
  tensor<std::int32_t> l({2}, {0, 0});
  run.forward({{"scores", s}, {"len", l}});
  CHECK(run.output()[0] == 0.0);
  run.backward();
  CHECK(run.input_grad("scores").dims == dims_t{2, 3, 0});
}

// ---- sizes that overflow ----

TEST_CASE("dims_t::size() refuses a product beyond int64 instead of wrapping") {
  CHECK_THROWS_AS((dims_t{std::int64_t{1} << 32, std::int64_t{1} << 32}.size()), shape_error);
  CHECK_THAT(message_of([] { (void)dims_t{std::int64_t{1} << 32, std::int64_t{1} << 32}.size(); }),
             Catch::Contains("[4294967296, 4294967296]") && Catch::Contains("more than 2^63 elements"));
  CHECK_THROWS_AS(tensor<float>(dims_t{std::int64_t{1} << 40, std::int64_t{1} << 40}), shape_error);
  CHECK((dims_t{std::int64_t{1} << 31, 4}.size()) == (std::int64_t{1} << 33));
}

TEST_CASE("a bound dim whose products overflow is refused when binding, before anything is allocated or read") {
  // x [T, 1] and x xᵀ [T, T]: T = 2^32 makes 2^64 elements. The feed is a view over 4 floats
  // that claims T = 2^32: binding must throw before any kernel reads it.
  auto x = input<"x", shape<dyn<"T">, fix<1>>>();
  auto g = make_graph(sum(matmul<false, true>(x, x)));
  param_store<float> p;
  auto run = g.executor<float>(p);
  float four[4] = {1, 2, 3, 4};
  const tensor_view<const float> claim{four, dims_t{std::int64_t{1} << 32, 1}};
  const std::string message = message_of([&] { run.forward({{"x", claim}}); });
  CHECK_THAT(message, Catch::Contains("matmul") && Catch::Contains("[4294967296, 4294967296]") &&
                          Catch::Contains("more than 2^57 elements"));
  CHECK_THROWS_AS(run.forward({{"x", claim}}), shape_error);
  CHECK(run.arena_bytes() == 0);
}

TEST_CASE("a KV cache whose capacity makes its storage overflow int64 is refused before allocating") {
  auto step = make_graph(nn::language_model<lm, nn::decode_mode>::logits());
  CHECK_THROWS_AS(nn::kv_cache<float>(step, 4, std::int64_t{1} << 62), shape_error);
}

TEST_CASE("gemm refuses dims beyond BLAS's int instead of wrapping them") {
  float a[4] = {}, b[4] = {}, c[4] = {};
  const std::int64_t huge = std::int64_t{1} << 31;
  CHECK_THAT(message_of([&] { ops::gemm<float>(false, false, 2, 2, huge, 1.0f, a, huge, b, 2, 0.0f, c, 2); }),
             Catch::Contains("matmul") && Catch::Contains("2147483648") && Catch::Contains("2^31 - 1"));
  CHECK(c[0] == 0.0f);
}

// ---- executor state after failures and misuse ----

TEST_CASE("after a forward that failed inside a kernel, output() and backward() refuse") {
  // a token id out of range is found by the embedding kernel, after binding succeeded
  auto tok = input<"tok", shape<dyn<"T">>, int>();
  auto w = param<"emb", shape<fix<5>, fix<3>>>();
  auto g = make_graph(sum(embedding(tok, w)));
  auto params = g.make_params<float>(4);
  auto run = g.executor<float>(params);
  tensor<std::int32_t> good({2}, {1, 4}), bad({2}, {1, 5});
  run.forward({{"tok", good}});
  run.backward();
  CHECK_THAT(message_of([&] { run.forward({{"tok", bad}}); }), Catch::Contains("token id 5"));
  CHECK_THAT(message_of([&] { (void)run.output(); }), Catch::Contains("the last forward() failed"));
  CHECK_THAT(message_of([&] { run.backward(); }), Catch::Contains("the last forward() failed"));
  run.forward({{"tok", good}});  // a good forward makes everything readable again
  CHECK(std::isfinite(run.output()[0]));
  run.backward();
}

TEST_CASE("reshaping a parameter between forward() and backward() is refused, not written to freed memory") {
  auto x = input<"x", shape<dyn<"T">, fix<3>>>();
  auto g = make_graph(sum(nn::linear<"lin", 2>(x)));
  tensor<float> xs({4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  const bool packed = GENERATE(true, false);
  INFO((packed ? "made by make_params (packed)" : "built with set()"));
  param_store<float> params;
  if (packed) {
    params = g.make_params<float>(5);
  } else {
    params.set("lin.weight", tensor<float>(dims_t{2, 3}));
    params.set("lin.bias", tensor<float>(dims_t{2}));
  }
  REQUIRE(params.packed() == packed);
  auto run = g.executor<float>(params);
  // set() of the same shape writes into the parameter's place: nothing is freed, and backward
  // goes on (as after an in-place change of the value)
  run.forward({{"x", xs}});
  params.set("lin.weight", tensor<float>(dims_t{2, 3}));
  run.backward();
  // y = Σ x Wᵀ + b: dL/dW[o, i] = Σ_t x[t, i] = 22, 26, 30 for every output o
  CHECK(params.grad("lin.weight")[0] == 22.0f);
  CHECK(params.grad("lin.weight")[5] == 30.0f);
  // another shape frees the memory the forward read: backward refuses
  run.forward({{"x", xs}});
  params.set("lin.weight", tensor<float>(dims_t{3, 3}));
  CHECK_THAT(message_of([&] { run.backward(); }), Catch::Contains("the parameter store's layout changed after forward()"));
  CHECK_THAT(message_of([&] { run.forward({{"x", xs}}); }), Catch::Contains("lin.weight"));
  params.set("lin.weight", tensor<float>(dims_t{2, 3}));  // back to the graph's shape
  run.forward({{"x", xs}});
  run.backward();
  CHECK(params.grad("lin.weight")[2] == 30.0f);
}

// The executor keeps the store entries it found by name (param_store::find) until the store's
// layout_version() changes. A store assigned as a whole (a checkpoint loaded into it: copy or
// move) frees or reuses every entry, and a name added later must be found: each forward after
// such a change must read the new store, never the old entries.
TEST_CASE("a parameter store assigned as a whole, or given a missing parameter, is read afresh by the next forward") {
  auto x = input<"x", shape<dyn<"T">, fix<3>>>();
  auto g = make_graph(sum(nn::linear<"lin", 2>(x)));
  tensor<float> xs({4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  auto sum_with = [&](float w, float b) {  // Σ_t Σ_o (x[t] · W[o] + b[o]) with every weight w: 2 · (78 w + 4 b)
    param_store<float> p;
    p.set("lin.weight", tensor<float>({2, 3}, {w, w, w, w, w, w}));
    p.set("lin.bias", tensor<float>({2}, {b, b}));
    return p;
  };
  auto params = sum_with(1, 0);
  auto run = g.executor<float>(params);
  run.forward({{"x", xs}});
  CHECK(run.output()[0] == 156.0f);
  SECTION("copy-assigned") {
    const auto other = sum_with(2, 1);
    params = other;
    run.forward({{"x", xs}});
    CHECK(run.output()[0] == 320.0f);
  }
  SECTION("move-assigned (the old entries are freed)") {
    params = sum_with(0.5f, 2);
    run.forward({{"x", xs}});
    CHECK(run.output()[0] == 94.0f);
    run.backward();
    CHECK(params.grad("lin.weight")[0] == 22.0f);
  }
  SECTION("moved from, then given its parameters again") {
    auto taken = std::move(params);
    CHECK_THAT(message_of([&] { run.forward({{"x", xs}}); }), Catch::Contains("missing from the store"));
    params.set("lin.weight", tensor<float>({2, 3}, {1, 1, 1, 1, 1, 1}));
    CHECK_THAT(message_of([&] { run.forward({{"x", xs}}); }), Catch::Contains("\"lin.bias\""));
    params.set("lin.bias", tensor<float>({2}, {3, 3}));  // a name added: found by the next forward
    run.forward({{"x", xs}});
    CHECK(run.output()[0] == 180.0f);
  }
}

TEST_CASE("one executor called from two threads at once refuses the second call instead of racing") {
  auto x = input<"x", shape<dyn<"T">, fix<64>>>();
  auto g = make_graph(sum(softmax(matmul<false, true>(x, x))));
  param_store<float> p;
  auto run = g.executor<float>(p, {.threads = 1});
  // different shapes in the two threads: with a race, each would rebind the other's buffers
  const tensor<float> a = test::random_tensor<float>({300, 64}, 6), b = test::random_tensor<float>({17, 64}, 7);
  std::atomic<int> refused{0}, other{0}, done{0}, ready{0};
  std::string other_what;
  // both threads start together and call until one of them has been refused (at most 20000
  // calls each): a fixed 200 calls could all finish before the other thread was scheduled on a
  // loaded machine, and then nothing overlapped (a failure of the test, not of the executor)
  auto worker = [&](const tensor<float>& xs) {
    ++ready;
    while (ready.load() < 2) std::this_thread::yield();
    for (int i = 0; i < 20000 && refused.load() == 0; ++i) {
      try {
        run.forward({{"x", xs}});
        ++done;
      } catch (const error& e) {
        if (std::string(e.what()).find("not thread-safe") != std::string::npos) ++refused;
        else ++other;
      }
    }
  };
  std::thread t1(worker, std::cref(a)), t2(worker, std::cref(b));
  t1.join();
  t2.join();
  INFO("completed " << done << ", refused " << refused);
  CHECK(other == 0);
  CHECK(refused > 0);
  CHECK(done > 0);
  // the executor still works and gives the single-threaded result
  run.forward({{"x", b}});
  const float after = run.output()[0];
  auto fresh = g.executor<float>(p, {.threads = 1});
  fresh.forward({{"x", b}});
  CHECK(after == fresh.output()[0]);
}

TEST_CASE("a thread count below 0 or above max_threads is refused, and set_threads keeps the old one") {
  auto x = input<"x", shape<fix<2>>>();
  auto g = make_graph(sum(x));
  param_store<float> p;
  CHECK_THAT(message_of([&] { (void)g.executor<float>(p, {.threads = 100000}); }),
             Catch::Contains("threads must be 0 (all cores) to 1024, got 100000"));
  auto run = g.executor<float>(p, {.threads = 2});
  CHECK_THROWS_AS(run.set_threads(-1), value_error);
  CHECK(run.threads() == 2);
}

// ---- sampling ----

TEST_CASE("sampling settings out of their domain are refused: NaN is not greedy, -1 is not all") {
  const std::vector<float> logits{0.1f, 2.0f, -1.0f};
  const std::span<const float> l(logits);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK_THAT(message_of([&] { nn::pick_token<float>(l, nan, 0, 0.5); }), Catch::Contains("temperature"));
  CHECK_THROWS_AS(nn::pick_token<float>(l, -0.5, 0, 0.5), value_error);
  CHECK_THROWS_AS(nn::pick_token<float>(l, inf, 0, 0.5), value_error);
  CHECK_THAT(message_of([&] { nn::pick_token<float>(l, 1.0, -1, 0.5); }), Catch::Contains("top_k must be >= 0"));
  CHECK_THROWS_AS(nn::pick_token<float>(l, 1.0, 0, 1.0), value_error);
  CHECK(nn::pick_token<float>(l, 0.0, 0, 0.0) == 1);  // greedy: the arg max

  auto step = make_graph(nn::language_model<lm, nn::decode_mode>::logits());
  auto params = step.make_params<float>(8);
  auto run = step.executor<float>(params, {.inference = true});
  nn::kv_cache<float> cache(step, 1, 16);
  for (const auto& bad : {nn::generate_options{.temperature = nan}, nn::generate_options{.top_k = -3},
                          nn::generate_options{.max_new_tokens = -1}})
    CHECK_THROWS_AS(nn::generate(run, cache, {{1, 2}}, bad), value_error);
}

TEST_CASE("non-finite logits are refused in greedy decoding and sampling, −inf alone forbids a token") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> plus_inf{inf, 0.0f, inf}, with_nan{0.1f, nan, 2.0f}, all_minus_inf{-inf, -inf};
  for (double temperature : {0.0, 1.0}) {
    CHECK_THAT(message_of([&] { nn::pick_token<float>(std::span<const float>(plus_inf), temperature, 0, 0.5); }),
               Catch::Contains("pick_token: logit 0 is +inf"));
    CHECK_THAT(message_of([&] { nn::pick_token<float>(std::span<const float>(with_nan), temperature, 0, 0.5); }),
               Catch::Contains("pick_token: logit 1 is NaN"));
    CHECK_THAT(message_of([&] { nn::pick_token<float>(std::span<const float>(all_minus_inf), temperature, 0, 0.5); }),
               Catch::Contains("every logit is −inf"));
  }
  const std::vector<float> forbidden{-inf, 0.5f, -inf, 0.25f};
  CHECK(nn::pick_token<float>(std::span<const float>(forbidden), 0.0, 0, 0.0) == 1);
  for (double draw : {0.0, 0.3, 0.7, 0.999}) {
    const int t = nn::pick_token<float>(std::span<const float>(forbidden), 1.0, 0, draw);
    CHECK((t == 1 || t == 3));  // never a token of probability 0
  }
}

TEST_CASE("beam_search refuses a negative max_new_tokens, a length penalty that is not finite, and NaN logits") {
  auto step = make_graph(nn::language_model<lm, nn::decode_mode>::logits());
  auto params = step.make_params<float>(8);
  auto run = step.executor<float>(params, {.inference = true});
  nn::kv_cache<float> cache(step, 2, 16);
  const std::vector<std::vector<int>> prompt{{1, 2}};
  CHECK_THAT(message_of([&] { nn::beam_search(run, cache, prompt, {.beam = 2, .max_new_tokens = -5}); }),
             Catch::Contains("max_new_tokens must be >= 0, got -5"));
  CHECK_THAT(message_of([&] {
               nn::beam_search(run, cache, prompt, {.beam = 2, .length_penalty = std::numeric_limits<double>::quiet_NaN()});
             }),
             Catch::Contains("length_penalty must be a finite number"));
  CHECK(nn::beam_search(run, cache, prompt, {.beam = 2, .max_new_tokens = 3}).hypotheses.size() == 1);
  for (auto& [name, e] : params)  // a model whose logits are NaN
    if (name.find("head") != std::string::npos || name.find("lm") != std::string::npos)
      for (auto& v : e.value.values()) v = std::numeric_limits<float>::quiet_NaN();
  CHECK_THAT(message_of([&] { nn::beam_search(run, cache, prompt, {.beam = 2, .max_new_tokens = 3}); }),
             Catch::Contains("beam_search: logit 0 is NaN"));
  CHECK_THAT(message_of([&] { nn::generate(run, cache, {{1, 2}, {3}}, {.max_new_tokens = 3}); }),
             Catch::Contains("logit 0 is NaN"));
}

TEST_CASE("a feed with a negative size is refused naming the size, not as an unbound dim") {
  auto x = input<"x", shape<dyn<"T">, fix<3>>>();
  auto g = make_graph(sum(x));
  auto params = g.make_params<float>(1);
  auto run = g.executor<float>(params);
  tensor<float> ok(dims_t{2, 3});
  const feed bad("x", tensor_view<const float>{ok.data(), dims_t{-4, 3}});
  CHECK_THAT(message_of([&] { run.forward({bad}); }),
             Catch::Contains("input \"x\" axis 0 has size -4 (shape [-4, 3]): a size cannot be negative"));
}
