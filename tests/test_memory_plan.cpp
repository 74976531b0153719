// The memory plan: buffers with disjoint lifetimes share the arena's bytes, some nodes run in
// place, and none of it changes a single bit of any result — for any thread count — while the
// arena shrinks and its size is known before running.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "loom/loom.hpp"
#include "loom/nn/kv_cache.hpp"
#include "loom/nn/transformer.hpp"
#include "../graph/arena_allocator.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

constexpr nn::transformer_config small{.d_model = 16, .heads = 2, .ffn = 24, .encoder_layers = 2,
                                       .decoder_layers = 2, .src_vocab = 11, .tgt_vocab = 9, .dropout = 0.1};

tensor<std::int32_t> ints(dims_t d, std::vector<std::int32_t> v) { return tensor<std::int32_t>(d, std::move(v)); }

struct batch {
  tensor<std::int32_t> src = ints({3, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 9, 10, 1, 0, 0});
  tensor<std::int32_t> src_len = ints({3}, {5, 3, 3});
  tensor<std::int32_t> tgt = ints({3, 4}, {1, 2, 3, 4, 1, 5, 6, 0, 1, 7, 0, 0});
  tensor<std::int32_t> target = ints({3, 4}, {2, 3, 4, 8, 5, 6, 8, 0, 7, 8, 0, 0});
  tensor<std::int32_t> seed = ints({2}, {5, 1});
  std::vector<feed> feeds(bool with_seed = true) const {
    std::vector<feed> f{{"src", src}, {"src_len", src_len}, {"tgt", tgt}, {"target", target}};
    if (with_seed) f.emplace_back("seed", seed);
    return f;
  }
};

// The loss and every parameter gradient of one training step, as raw floats.
template <class G>
std::vector<float> step(const G& g, exec_options options, std::size_t* arena = nullptr) {
  auto p = g.template make_params<float>(3);
  auto run = g.template executor<float>(p, options);
  const batch b;
  const auto feeds = b.feeds(g.plan().input_index("seed") >= 0);
  run.forward(feeds);
  run.backward();
  run.forward(feeds);  // twice: the second step runs on reused buffers
  run.backward();
  if (arena) *arena = run.arena_bytes();
  std::vector<float> all{run.output()[0]};
  for (auto& [name, e] : p) all.insert(all.end(), e.grad.values().begin(), e.grad.values().end());
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every pair of buffers whose bytes overlap has disjoint lifetimes.
void require_no_overlapping_tenants(const memory_report& r) {
  for (std::size_t a = 0; a < r.buffers.size(); ++a)
    for (std::size_t b = a + 1; b < r.buffers.size(); ++b) {
      const auto& x = r.buffers[a];
      const auto& y = r.buffers[b];
      const bool bytes_overlap = x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
      if (!bytes_overlap) continue;
      INFO(x.what << " [" << x.first << ", " << (x.kept ? "end" : std::to_string(x.last)) << "] and " << y.what
                  << " [" << y.first << ", " << (y.kept ? "end" : std::to_string(y.last)) << "]");
      const bool x_before_y = !x.kept && x.last < y.first;
      const bool y_before_x = !y.kept && y.last < x.first;
      REQUIRE((x_before_y || y_before_x));
    }
}

}  // namespace

TEST_CASE("sharing buffers changes no bit of the loss or of any gradient, for 1, 2 and 4 threads") {
  auto g = make_graph(nn::seq2seq<small, nn::train_mode>::loss<0, 0.1>());
  std::size_t unshared_arena = 0, shared_arena = 0;
  // keep_all runs the graph as written (no fusion either): compare with the unfused plan
  const auto reference = step(g, {.threads = 1, .keep_all = true, .fuse = false}, &unshared_arena);
  CHECK(same_bits(reference, step(g, {.threads = 1, .fuse = false}, &shared_arena)));
  CHECK(same_bits(reference, step(g, {.threads = 2, .fuse = false})));
  CHECK(same_bits(reference, step(g, {.threads = 4, .fuse = false})));
  CHECK(shared_arena < unshared_arena / 2);
  // and with the fused plan, the same bits for any thread count
  const auto fused = step(g, {.threads = 1, .fuse = true});
  CHECK(same_bits(fused, step(g, {.threads = 2, .fuse = true})));
  CHECK(same_bits(fused, step(g, {.threads = 4, .fuse = true})));
}

TEST_CASE("the planned arena is known before running and equals what forward allocates") {
  auto g = make_graph(nn::seq2seq<small, nn::train_mode>::loss<0, 0.1>());
  const memory_report planned = g.memory_plan<float>({{"B", 3}, {"S", 5}, {"T", 4}});
  INFO(planned.str());
  CHECK(planned.peak_bytes > 0);
  CHECK(planned.peak_bytes < planned.unshared_bytes);
  CHECK(planned.in_place > 0);
  auto p = g.make_params<float>(3);
  auto run = g.executor<float>(p);
  const batch b;
  run.forward(b.feeds());
  CHECK(run.planned_bytes() == planned.peak_bytes);
  CHECK(run.arena_bytes() == planned.peak_bytes);
  // larger dims: a larger plan, and the arena grows to hold it
  const memory_report longer = g.memory_plan<float>({{"B", 3}, {"S", 50}, {"T", 40}});
  CHECK(longer.peak_bytes > planned.peak_bytes);
}

TEST_CASE("no two buffers that share bytes are alive at the same step, in every graph of these tests") {
  SECTION("training") {
    auto g = make_graph(nn::seq2seq<small, nn::train_mode>::loss<0, 0.1>());
    require_no_overlapping_tenants(g.memory_plan<float>({{"B", 3}, {"S", 5}, {"T", 4}}));
    require_no_overlapping_tenants(g.memory_plan<double>({{"B", 1}, {"S", 17}, {"T", 1}}));
  }
  SECTION("evaluation (inference: values die after their last reader)") {
    auto g = make_graph(nn::seq2seq<small, nn::eval_mode>::loss<0>());
    const auto r = g.memory_plan<float>({{"B", 3}, {"S", 5}, {"T", 4}}, {.inference = true});
    require_no_overlapping_tenants(r);
    const auto training = g.memory_plan<float>({{"B", 3}, {"S", 5}, {"T", 4}});
    CHECK(r.peak_bytes < training.peak_bytes);
  }
}

constexpr nn::transformer_config deep{.d_model = 16, .heads = 2, .ffn = 24, .decoder_layers = 6, .tgt_vocab = 9};
constexpr nn::transformer_config shallow{.d_model = 16, .heads = 2, .ffn = 24, .decoder_layers = 1, .tgt_vocab = 9};

TEST_CASE("an inference plan holds a few layers' activations, not the whole stack") {
  // a decoder-only stack: each layer's buffers are free for the next one once it is done
  auto deep_g = make_graph(nn::language_model<deep>::logits());
  auto shallow_g = make_graph(nn::language_model<shallow>::logits());
  const auto d = deep_g.memory_plan<float>({{"B", 8}, {"T", 32}}, {.inference = true});
  const auto s = shallow_g.memory_plan<float>({{"B", 8}, {"T", 32}}, {.inference = true});
  INFO(d.str(5) << s.str(5));
  // six times the layers, not six times the memory: the buffers of finished layers are reused
  CHECK(d.peak_bytes <= s.peak_bytes + s.peak_bytes / 4);
  CHECK(d.unshared_bytes > 4 * s.unshared_bytes);
}

TEST_CASE("memory_plan names a missing or unknown dim") {
  auto g = make_graph(nn::seq2seq<small, nn::train_mode>::loss<0, 0.1>());
  CHECK_THAT(test::message_of([&] { (void)g.memory_plan<float>({{"B", 3}, {"S", 5}}); }),
             Catch::Contains("no value given for dim \"T\""));
  CHECK_THAT(test::message_of([&] { (void)g.memory_plan<float>({{"B", 3}, {"S", 5}, {"T", 4}, {"Q", 1}}); }),
             Catch::Contains("no dim \"Q\""));
  CHECK_THAT(test::message_of([&] { (void)g.memory_plan<float>({{"B", -1}, {"S", 5}, {"T", 4}}); }),
             Catch::Contains("negative"));
}

TEST_CASE("keep_all (debugging) gives every buffer its own bytes") {
  auto g = make_graph(nn::seq2seq<small, nn::train_mode>::loss<0, 0.1>());
  const auto r = g.memory_plan<float>({{"B", 3}, {"S", 5}, {"T", 4}}, {.keep_all = true});
  CHECK(r.peak_bytes == r.unshared_bytes);
  CHECK(r.in_place == 0);
}

namespace {
constexpr nn::transformer_config recomputed = [] {
  auto c = small;
  c.recompute = true;
  return c;
}();
}  // namespace

TEST_CASE("recomputing each layer in backward changes no bit of the loss or of any gradient") {
  // (dropout's streams are keyed by each node's structure, which the checkpoint nodes change:
  // the reference is the same marked graph with recomputation off)
  auto marked = make_graph(nn::seq2seq<recomputed, nn::train_mode>::loss<0, 0.1>());
  const auto reference = step(marked, {.threads = 1, .recompute = false});
  CHECK(same_bits(reference, step(marked, {.threads = 1})));
  CHECK(same_bits(reference, step(marked, {.threads = 2})));
  CHECK(same_bits(reference, step(marked, {.threads = 4})));
}

constexpr nn::transformer_config no_dropout{.d_model = 16, .heads = 2, .ffn = 24, .encoder_layers = 2,
                                            .decoder_layers = 2, .src_vocab = 11, .tgt_vocab = 9};
constexpr nn::transformer_config no_dropout_marked{.d_model = 16, .heads = 2, .ffn = 24, .encoder_layers = 2,
                                                   .decoder_layers = 2, .src_vocab = 11, .tgt_vocab = 9,
                                                   .recompute = true};

TEST_CASE("without dropout, marking layers for recomputation changes no bit either") {
  auto plain = make_graph(nn::seq2seq<no_dropout, nn::train_mode>::loss<0, 0.1>());
  auto marked = make_graph(nn::seq2seq<no_dropout_marked, nn::train_mode>::loss<0, 0.1>());
  CHECK(same_bits(step(plain, {.threads = 2}), step(marked, {.threads = 2})));
}

TEST_CASE("recomputation passes gradcheck and needs less memory than keeping every layer") {
  auto marked = make_graph(nn::seq2seq<recomputed, nn::train_mode>::loss<0, 0.1>());
  auto p = marked.make_params<double>(2);
  const batch b;
  const auto feeds = b.feeds();
  auto r = gradcheck(marked.plan(), p, std::span<const feed>(feeds));
  INFO(r.str());
  CHECK(r.ok);
  const auto kept = marked.memory_plan<float>({{"B", 16}, {"S", 64}, {"T", 64}}, {.recompute = false});
  const auto again = marked.memory_plan<float>({{"B", 16}, {"S", 64}, {"T", 64}});
  INFO(kept.str(5) << again.str(5));
  CHECK(again.peak_bytes < kept.peak_bytes * 3 / 4);
  require_no_overlapping_tenants(again);
}

TEST_CASE("a second backward without a new forward is refused (its values were reused)") {
  auto g = make_graph(nn::seq2seq<small, nn::train_mode>::loss<0, 0.1>());
  auto p = g.make_params<float>(3);
  auto run = g.executor<float>(p);
  const batch b;
  run.forward(b.feeds());
  run.backward();
  CHECK_THAT(test::message_of([&] { run.backward(); }), Catch::Contains("call forward() again"));
  run.forward(b.feeds());
  CHECK_NOTHROW(run.backward());
}

TEST_CASE("ops running in place (forward and backward) give the same bits as with separate buffers") {
  // scale → mask_bool → softmax → silu → mul: each may overwrite its input, and its backward
  // its output's gradient
  auto x = input<"x", shape<dyn<"B">, fix<3>, fix<5>>>();
  auto allowed = input<"allowed", shape<fix<3>, fix<5>>, bool>();
  auto w = param<"w", shape<fix<5>>, init<init_kind::ones>>();
  auto g = make_graph(sum(mul(silu(softmax(mask_bool(scale<1.5>(relu(x)), allowed))), w)));
  const auto xs = test::random_tensor<double>({4, 3, 5}, 9);
  tensor<std::uint8_t> ms({3, 5}, {1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1});
  auto run = [&](exec_options o) {
    param_store<double> p;
    init_params(g.plan(), p, 1);
    test::randomize(p, 2);
    auto ex = g.executor<double>(p, o);
    ex.forward({{"x", xs}, {"allowed", ms}});
    ex.backward();
    std::vector<double> r{ex.output()[0]};
    auto dx = ex.input_grad("x");
    r.insert(r.end(), dx.data, dx.data + dx.dims.size());
    r.insert(r.end(), p.grad("w").values().begin(), p.grad("w").values().end());
    return r;
  };
  const auto separate = run({.input_grads = true, .keep_all = true});
  const auto shared = run({.input_grads = true});
  REQUIRE(separate.size() == shared.size());
  CHECK(std::memcmp(separate.data(), shared.data(), separate.size() * sizeof(double)) == 0);
  const auto r = g.memory_plan<double>({{"B", 4}}, {.input_grads = true});
  INFO(r.str(-1));
  CHECK(r.in_place >= 2);  // mask_bool and softmax over scale's buffer
  CHECK(r.peak_bytes < r.unshared_bytes);
}

TEST_CASE("a decoding step's arena is known before running and holds no copy of the cache") {
  constexpr nn::transformer_config lm{.d_model = 16, .heads = 2, .ffn = 24, .decoder_layers = 2, .tgt_vocab = 9};
  auto step = make_graph(nn::language_model<lm, nn::decode_mode>::logits());
  auto p = step.make_params<float>(1);
  auto run = step.executor<float>(p, {.inference = true});
  nn::kv_cache<float> cache(step, 1, 2000);
  const tensor<std::int32_t> first = ints({1}, {0});
  auto tokens = [](std::int64_t n) { return tensor<std::int32_t>(dims_t{1, n}); };
  nn::decode_step(run, cache, {{"tokens", tokens(5)}, {"positions", tokens(5)}, {"first", first}});
  nn::decode_step(run, cache, {{"tokens", tokens(1)}, {"positions", tokens(1)}, {"first", first}});
  const auto planned = step.memory_plan<float>({{"B", 1}, {"T", 1}, {"P", 5}}, {.inference = true});
  INFO(planned.str());
  CHECK(run.planned_bytes() == planned.peak_bytes);
  for (const auto& b : planned.buffers) CHECK(b.shape.find("P + T, 8]") == std::string::npos);  // no keys/values
  // a thousand more cached positions add only a few rows of scores [1, 2, 1, P + 1], not the cache
  const auto long_cache = step.memory_plan<float>({{"B", 1}, {"T", 1}, {"P", 1005}}, {.inference = true});
  INFO(long_cache.str());
  CHECK(long_cache.peak_bytes - planned.peak_bytes <= 4 * (2 * 1000 + 16) * sizeof(float));
}

TEST_CASE("the arena's allocator aligns large blocks to 2 MiB and small ones to 64 bytes") {
  loom::arena_allocator<float> a;
  for (std::size_t n : {std::size_t{2}, std::size_t{1000}, (std::size_t{1} << 19) - 1, std::size_t{1} << 19,
                        (std::size_t{3} << 19) + 5}) {
    float* p = a.allocate(n);
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    INFO(n << " floats");
    CHECK(at % 64 == 0);
    if (n * sizeof(float) >= (std::size_t{1} << 21)) CHECK(at % (std::size_t{1} << 21) == 0);
    p[0] = 1.0f;  // both ends written: the ASan build checks that the block holds n floats
    p[n - 1] = 2.0f;
    a.deallocate(p, n);
  }
  CHECK_THROWS_AS(a.allocate(static_cast<std::size_t>(-1) / 2), std::bad_array_new_length);
}
