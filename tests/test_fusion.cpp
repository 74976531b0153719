// Fusion as a plan rewrite: attention written as matmul → scale → masks → softmax → matmul runs
// as one fused node, which must give what the primitives give (to 1e-12 in double, outputs and
// every gradient), keep no [T, S] buffer, and stay thread-count independent; the unfused graph
// stays the reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "loom/nn/transformer.hpp"
#include "test_support.hpp"

#include "../ops/fused_attention.hpp"  // attention_force_small_lanes, _blocked, attention_paths

using namespace loom;
using test::max_rel;
using test::ops_of;

namespace {

constexpr long D = 8;
using X = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>;
using Mem = input_node<"mem", shape<dyn<"B">, dyn<"S">, fix<D>>>;
using Len = input_node<"len", shape<dyn<"B">>, int>;
using Allowed = input_node<"allowed", shape<dyn<"B">, fix<1>, dyn<"T">, dyn<"T">>, bool>;


// Output and every gradient (parameters, real inputs) of one forward + backward, in double.
struct run_result {
  std::vector<double> out, grads;
};

template <class G>
run_result run(const G& g, param_store<double>& p, std::span<const feed> feeds, exec_options o) {
  o.input_grads = true;
  auto ex = g.template executor<double>(p, o);
  ex.forward(feeds);
  run_result r;
  auto y = ex.output();
  r.out.assign(y.data, y.data + y.size());
  std::vector<tensor<double>> cot{test::random_tensor<double>(y.dims, 77)};
  ex.backward(cot);
  for (auto& [name, e] : p) r.grads.insert(r.grads.end(), e.grad.values().begin(), e.grad.values().end());
  for (const feed& f : feeds)
    if (f.type() == storage::f64) {
      auto gx = ex.input_grad(f.name());
      r.grads.insert(r.grads.end(), gx.data, gx.data + gx.size());
    }
  return r;
}


// Fused and unfused runs of g agree; the fused plan has an attention node and no softmax.
template <class G>
void require_fused_equals_unfused(const G& g, std::initializer_list<feed> feeds, std::uint64_t seed = 1) {
  auto p = g.template make_params<double>(seed);
  test::randomize(p, seed + 1);
  const std::vector<feed> fs(feeds);
  const executor<double> probe(g.plan(), p, {.fuse = true});
  const auto ops = ops_of(probe.plan());
  CHECK(ops.count("attention") == 1);
  CHECK(ops.count("softmax") == 0);
  const run_result unfused = run(g, p, fs, {.fuse = false});
  const run_result fused = run(g, p, fs, {.fuse = true});
  CHECK(max_rel(fused.out, unfused.out) <= 1e-12);
  CHECK(max_rel(fused.grads, unfused.grads) <= 1e-12);
  test::require_gradcheck(g, p, feeds, {.fuse = 1});
}

tensor<std::int32_t> ints(dims_t d, std::vector<std::int32_t> v) { return tensor<std::int32_t>(d, std::move(v)); }

}  // namespace

// Every mask kind over x [3, T, D]. Up to 32 keys the fused node runs its small-block kernels
// (ops/attention.cpp: 16 query rows per vector with AVX-512, 8 without, all keys in one block);
// from 33 to 128 keys the small-block forward and the blocked backward (which recomputes the
// weights from the forward's saved lse), or the small-block backward under a causal mask (no
// more keys than rows); past 128 the blocked ones both ways.
template <int H>
void every_mask_kind(long T) {
  auto x = test::random_tensor<double>({3, T, D}, 3);
  SECTION("no mask") { require_fused_equals_unfused(make_graph(nn::self_attention<"a", H>(X{})), {{"x", x}}); }
  SECTION("causal") {
    require_fused_equals_unfused(make_graph(nn::self_attention<"a", H>(X{}, nn::causal)), {{"x", x}});
  }
  SECTION("causal and padding, with a fully masked sequence") {
    auto len = ints({3}, {static_cast<std::int32_t>(T), 0, 2});
    require_fused_equals_unfused(make_graph(nn::self_attention<"a", H>(X{}, nn::causal, nn::padding(Len{}))),
                                 {{"x", x}, {"len", len}});
  }
  SECTION("left padding") {
    auto first = ints({3}, {0, 2, 4});
    require_fused_equals_unfused(make_graph(nn::self_attention<"a", H>(X{}, nn::causal, nn::left_padding(Len{}))),
                                 {{"x", x}, {"len", first}});
  }
  SECTION("boolean mask, broadcast over the heads") {
    tensor<std::uint8_t> allowed(dims_t{3, 1, T, T});
    for (std::int64_t i = 0; i < allowed.size(); ++i) allowed[i] = static_cast<std::uint8_t>((i * 7) % 3 != 0);
    require_fused_equals_unfused(make_graph(nn::self_attention<"a", H>(X{}, nn::allowed(Allowed{}))),
                                 {{"x", x}, {"allowed", allowed}});
  }
}

TEMPLATE_TEST_CASE_SIG("fused self-attention equals the primitives, with every mask kind", "", ((int H), H), 1, 2, 4) {
  every_mask_kind<H>(5);  // the small-block kernels
}

TEST_CASE("fused self-attention equals the primitives with every mask kind: 20 rows (a block and a ragged one)") {
  every_mask_kind<2>(20);  // small-block kernels: whole blocks of 16 (or 8) query rows and a partial one
}

// every_mask_kind at T keys, then the kernels it ran by path (ops::attention_paths): how many
// times each path ran during it
ops::attention_path_counts every_mask_kind_paths(long T) {
  const ops::attention_path_counts before = ops::attention_paths();
  every_mask_kind<2>(T);
  const ops::attention_path_counts after = ops::attention_paths();
  return {after.small_forward - before.small_forward, after.blocked_forward - before.blocked_forward,
          after.small_backward - before.small_backward, after.blocked_backward - before.blocked_backward};
}

TEST_CASE("fused self-attention equals the primitives with every mask kind: 48 keys (small forward, either backward)") {
  const ops::attention_path_counts ran = every_mask_kind_paths(48);
  CHECK(ran.small_forward > 0);
  CHECK(ran.blocked_forward == 0);
  CHECK(ran.small_backward + ran.blocked_backward > 0);
}

TEST_CASE("fused self-attention equals the primitives with every mask kind: 70 keys (small forward, either backward)") {
  const ops::attention_path_counts ran = every_mask_kind_paths(70);
  CHECK(ran.small_forward > 0);
  CHECK(ran.blocked_forward == 0);
  CHECK(ran.small_backward + ran.blocked_backward > 0);
}

TEST_CASE("fused self-attention equals the primitives with every mask kind: 70 keys, the blocked kernels forced") {
  struct reset_blocked {
    ~reset_blocked() { ops::attention_force_blocked(false); }
  } reset;
  ops::attention_force_blocked(true);
  const ops::attention_path_counts ran = every_mask_kind_paths(70);
  CHECK(ran.blocked_forward > 0);
  CHECK(ran.blocked_backward > 0);
  CHECK(ran.small_forward == 0);
  CHECK(ran.small_backward == 0);
}

// Which backward the fused node takes at 33-128 keys: the small-block one under a causal mask
// over no more keys than rows, the blocked one otherwise (ops/attention_small.hpp).
TEST_CASE("fused attention at 48 keys: the causal backward takes the small-block kernels, the unmasked one the blocked") {
  auto x = test::random_tensor<double>({2, 48, D}, 5);
  auto paths_of = [&](const auto& g) {
    auto p = g.template make_params<double>(3);
    const ops::attention_path_counts before = ops::attention_paths();
    (void)run(g, p, std::vector<feed>{{"x", x}}, {.fuse = true});
    const ops::attention_path_counts after = ops::attention_paths();
    return std::pair{after.small_backward - before.small_backward, after.blocked_backward - before.blocked_backward};
  };
  CHECK(paths_of(make_graph(nn::self_attention<"a", 2>(X{}, nn::causal))) == std::pair<std::int64_t, std::int64_t>{1, 0});
  CHECK(paths_of(make_graph(nn::self_attention<"a", 2>(X{}))) == std::pair<std::int64_t, std::int64_t>{0, 1});
}

// Heads of 16 and more: the small-block kernels transpose q and dO in registers 16 columns at a
// time (the tiny model's heads of 16 are one block; 20 and 33 add a ragged tail of columns).
TEMPLATE_TEST_CASE_SIG("fused attention with heads of 16 to 33 columns equals the primitives (small blocks)", "",
                       ((long DQ, long DV), DQ, DV), (16, 16), (20, 33)) {
  auto q = input<"q", shape<dyn<"B">, fix<2>, dyn<"T">, fix<DQ>>>();
  auto k = input<"k", shape<dyn<"B">, fix<2>, dyn<"S">, fix<DQ>>>();
  auto v = input<"v", shape<dyn<"B">, fix<2>, dyn<"S">, fix<DV>>>();
  auto rnd = [](long rows, long cols, std::uint64_t seed) { return test::random_tensor<double>({2, 2, rows, cols}, seed); };
  SECTION("causal and padding, 20 query rows (a block of 16 and a ragged one), 20 keys") {
    require_fused_equals_unfused(make_graph(nn::attention<{.is_causal = true}>(q, k, v, nn::padding(Len{}))),
                                 {{"q", rnd(20, DQ, 40)}, {"k", rnd(20, DQ, 41)}, {"v", rnd(20, DV, 42)},
                                  {"len", ints({2}, {20, 3})}});
  }
  SECTION("padding, 16 query rows against 9 keys") {
    require_fused_equals_unfused(make_graph(nn::attention<{}>(q, k, v, nn::padding(Len{}))),
                                 {{"q", rnd(16, DQ, 43)}, {"k", rnd(9, DQ, 44)}, {"v", rnd(9, DV, 45)},
                                  {"len", ints({2}, {9, 3})}});
  }
}

// The small-block kernels put 16 query rows in a vector where the CPU has AVX-512 and 8 where it
// has not. Every lane (query row) is computed alone, in the same order, so the output and dq
// must be the same bits with either width; dk and dv sum over the query rows of each block, then
// add the block's sum, so with 8 rows there are twice as many partial sums: equal to rounding.
// Both widths are forced here, on any CPU, in float and in double.
TEMPLATE_TEST_CASE("the small-block attention kernels give the same bits with 8 and 16 query rows per vector", "",
                   float, double) {
  using F = TestType;
  struct reset_lanes {
    ~reset_lanes() { ops::attention_force_small_lanes(0); }
  } reset;
  auto q = input<"q", shape<dyn<"B">, fix<2>, dyn<"T">, fix<20>>>();
  auto k = input<"k", shape<dyn<"B">, fix<2>, dyn<"S">, fix<20>>>();
  auto v = input<"v", shape<dyn<"B">, fix<2>, dyn<"S">, fix<33>>>();
  auto g = make_graph(nn::attention<{.is_causal = true}>(q, k, v, nn::padding(Len{})));
  // rows (and keys): one short block of 8; a block of 8 and a ragged one; a block of 16 and a
  // ragged one; every key the small backward takes without a causal mask (two blocks of 16, four
  // of 8); 48 keys (three blocks of 16, six of 8), which it takes under this causal one
  const long T = GENERATE(2, 13, 20, 32, 48);
  auto rnd = [&](long cols, std::uint64_t seed) { return test::random_tensor<F>({2, 2, T, cols}, seed); };
  const tensor<F> vt = rnd(33, 52);
  const std::vector<feed> feeds{{"q", rnd(20, 50)}, {"k", rnd(20, 51)}, {"v", vt},
                                {"len", ints({2}, {static_cast<std::int32_t>(T), 1})}};
  auto p = g.template make_params<F>(1);
  std::vector<F> result[2], sums[2];  // out and dq; dk and dv
  for (int i = 0; i < 2; ++i) {
    ops::attention_force_small_lanes(i == 0 ? 8 : 16);
    auto ex = g.template executor<F>(p, {.input_grads = true, .fuse = true});
    CHECK(ops_of(ex.plan()).count("attention") == 1);
    ex.forward(feeds);
    auto y = ex.output();
    result[i].assign(y.data, y.data + y.size());
    std::vector<tensor<F>> cot{test::random_tensor<F>(y.dims, 53)};
    ex.backward(cot);
    for (const char* name : {"q", "k", "v"}) {
      auto gx = ex.input_grad(name);
      auto& to = name[0] == 'q' ? result[i] : sums[i];
      to.insert(to.end(), gx.data, gx.data + gx.size());
    }
  }
  REQUIRE(result[0].size() == result[1].size());
  CHECK(std::memcmp(result[0].data(), result[1].data(), result[0].size() * sizeof(F)) == 0);
  REQUIRE(sums[0].size() == sums[1].size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < sums[0].size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(sums[0][i]) - sums[1][i]));
    scale = std::max(scale, std::abs(static_cast<double>(sums[1][i])));
  }
  CHECK(scale > 0);
  CHECK(diff <= scale * (std::is_same_v<F, float> ? 1e-5 : 1e-13));
  // and it is attention: batch entry 1 has one key, so each of its rows has the one weight 1 and
  // returns that key's value exactly: out[1, h, t, :] = v[1, h, 0, :]
  int exact = 0;
  for (long h = 0; h < 2; ++h)
    for (long t = 0; t < T; ++t)
      for (long c = 0; c < 33; ++c)
        exact += result[0][static_cast<std::size_t>(((2 + h) * T + t) * 33 + c)] == vt[((2 + h) * T) * 33 + c];
  CHECK(exact == 2 * T * 33);
}

TEST_CASE("attention_force_small_lanes takes 0, 8 or 16 and nothing else") {
  CHECK_THROWS_AS(ops::attention_force_small_lanes(4), std::invalid_argument);
  CHECK_THROWS_AS(ops::attention_force_small_lanes(32), std::invalid_argument);
  CHECK_NOTHROW(ops::attention_force_small_lanes(0));
}

TEST_CASE("fused cross-attention equals the primitives: S ≠ T, padding of the memory") {
  auto x = test::random_tensor<double>({2, 3, D}, 4);
  auto mem = test::random_tensor<double>({2, 6, D}, 5);
  auto len = ints({2}, {6, 4});
  require_fused_equals_unfused(make_graph(nn::cross_attention<"c", 2>(X{}, Mem{}, nn::padding(Len{}))),
                               {{"x", x}, {"mem", mem}, {"len", len}});
}

TEST_CASE("fused attention over rank-3 and rank-2 operands, one query row against many keys") {
  auto q3 = input<"q", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto k3 = input<"k", shape<dyn<"B">, dyn<"S">, fix<4>>>();
  auto v3 = input<"v", shape<dyn<"B">, dyn<"S">, fix<3>>>();
  require_fused_equals_unfused(make_graph(nn::attention(q3, k3, v3, nn::causal)),
                               {{"q", test::random_tensor<double>({2, 1, 4}, 6)},
                                {"k", test::random_tensor<double>({2, 300, 4}, 7)},
                                {"v", test::random_tensor<double>({2, 300, 3}, 8)}});
  auto q2 = input<"q", shape<dyn<"T">, fix<4>>>();
  auto k2 = input<"k", shape<dyn<"S">, fix<4>>>();
  auto v2 = input<"v", shape<dyn<"S">, fix<3>>>();
  require_fused_equals_unfused(make_graph(nn::attention(q2, k2, v2)),
                               {{"q", test::random_tensor<double>({70, 4}, 9)},  // more rows than a block
                                {"k", test::random_tensor<double>({260, 4}, 10)},
                                {"v", test::random_tensor<double>({260, 3}, 11)}});
}

TEST_CASE("a fused encoder-decoder trains to the same numbers as the unfused one") {
  constexpr nn::transformer_config c{.d_model = 16, .heads = 4, .ffn = 24, .encoder_layers = 2, .decoder_layers = 2,
                                     .src_vocab = 11, .tgt_vocab = 9};
  auto g = make_graph(nn::seq2seq<c, nn::eval_mode>::loss<0, 0.1>());
  auto src = ints({2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 0, 0});
  auto src_len = ints({2}, {5, 3});
  auto tgt = ints({2, 4}, {1, 2, 3, 4, 1, 5, 6, 0});
  auto target = ints({2, 4}, {2, 3, 4, 8, 5, 6, 8, 0});
  const std::vector<feed> feeds{{"src", src}, {"src_len", src_len}, {"tgt", tgt}, {"target", target}};
  auto p = g.make_params<double>(2);
  const executor<double> probe(g.plan(), p, {.fuse = true});
  CHECK(ops_of(probe.plan()).count("softmax") == 0);  // six attentions, all fused
  const run_result unfused = run(g, p, feeds, {.fuse = false});
  const run_result fused = run(g, p, feeds, {.fuse = true});
  CHECK(max_rel(fused.out, unfused.out) <= 1e-12);
  CHECK(max_rel(fused.grads, unfused.grads) <= 1e-12);
}

TEST_CASE("fused attention gives the same bits for 1, 2 and 4 threads") {
  auto g = make_graph(sum(nn::self_attention<"a", 2>(X{}, nn::causal)));
  auto p = g.make_params<float>(1);
  // several query and key blocks (the blocked kernels), or 24 rows and keys (the small-block
  // kernels: whole blocks of 16 or 8 rows and a ragged one)
  const long T = GENERATE(150, 24);
  auto x = test::random_tensor<float>({4, T, D}, 12);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 4}) {
    auto ex = g.executor<float>(p, {.threads = threads, .input_grads = true, .fuse = true});
    ex.forward({{"x", x}});
    ex.backward();
    std::vector<float> all{ex.output()[0]};
    for (auto& [name, e] : p) all.insert(all.end(), e.grad.values().begin(), e.grad.values().end());
    auto gx = ex.input_grad("x");
    all.insert(all.end(), gx.data, gx.data + gx.size());
    results.push_back(all);
  }
  CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
  CHECK(std::memcmp(results[0].data(), results[2].data(), results[0].size() * sizeof(float)) == 0);
}

TEST_CASE("fusion keeps no scores: the plan has no [B, H, T, T] buffer and a smaller arena") {
  auto g = make_graph(sum(nn::self_attention<"a", 4>(X{}, nn::causal)));
  const auto fused = g.memory_plan<float>({{"B", 8}, {"T", 128}}, {.fuse = true});
  const auto unfused = g.memory_plan<float>({{"B", 8}, {"T", 128}}, {.fuse = false});
  INFO(fused.str(8) << unfused.str(8));
  for (const auto& b : fused.buffers) CHECK(b.shape.find("T, T]") == std::string::npos);
  CHECK(fused.peak_bytes < unfused.peak_bytes / 2);
}

TEST_CASE("a node fused away is not readable, unless kept: then its pattern runs unfused") {
  auto g = make_graph(sum(nn::self_attention<"a", 2>(X{}, nn::causal)));
  auto p = g.make_params<float>(1);
  auto x = test::random_tensor<float>({1, 3, D}, 13);
  auto weights = nn::self_attention_weights<"a", 2>(X{}, nn::causal);
  auto ex = g.executor<float>(p);
  ex.forward({{"x", x}});
  CHECK_THAT(test::message_of([&] { ex.value(weights); }),
             Catch::Contains("was fused into attention") && Catch::Contains("keep()"));
  CHECK_THAT(ex.dot(), Catch::Contains("attention\\n"));
  ex.keep(weights);
  ex.forward({{"x", x}});
  auto w = ex.value(weights);  // [1, 2, 3, 3]: causal, each row sums to 1
  REQUIRE(w.dims == dims_t{1, 2, 3, 3});
  CHECK(w[1] == 0.0f);
  CHECK(std::abs(w[0] - 1.0f) < 1e-6);
  CHECK(ops_of(ex.plan()).count("attention") == 0);
}

TEST_CASE("fused linear layers (bias, relu, gelu epilogues) give the unfused bits, in float and in bf16") {
  // in bf16 (exec_options::precision) the fused layer applies bias and relu in the bf16 kernel's
  // tiles, the unfused graph in nodes of their own after a bf16 matmul
  const auto precision = GENERATE(compute_precision::f32, compute_precision::bf16);
  INFO("precision " << (precision == compute_precision::bf16 ? "bf16" : "f32"));
  auto ffn_relu = make_graph(sum(nn::linear<"l2", D>(relu(nn::linear<"l1", 24>(X{})))));
  auto ffn_gelu = make_graph(sum(nn::linear<"l2", D>(gelu(nn::linear<"l1", 24>(X{})))));
  auto x = test::random_tensor<float>({3, 70, D}, 14);
  auto bits = [&](const auto& g, bool fuse) {
    auto p = g.template make_params<float>(3);
    auto ex = g.template executor<float>(p, {.input_grads = true, .fuse = fuse, .precision = precision});
    ex.forward({{"x", x}});
    ex.backward();
    std::vector<float> all{ex.output()[0]};
    for (auto& [name, e] : p) all.insert(all.end(), e.grad.values().begin(), e.grad.values().end());
    auto gx = ex.input_grad("x");
    all.insert(all.end(), gx.data, gx.data + gx.size());
    return std::make_pair(all, ops_of(ex.plan()));
  };
  // 280 hidden units: the bias and relu added in loom's GEMM tiles (a ragged panel of 24
  // columns, 210 rows: a ragged tile of 2), the bias sums over 4 groups of 64 columns, a tile
  // of 16 and a scalar tail of 8
  auto wide_relu = make_graph(sum(nn::linear<"l2", D>(relu(nn::linear<"l1", 280>(X{})))));
  auto wide_gelu = make_graph(sum(nn::linear<"l2", D>(gelu(nn::linear<"l1", 280>(X{})))));
  for (int kind = 0; kind < 4; ++kind) {
    const int relu_or_gelu = kind % 2;
    INFO((kind < 2 ? "24" : "280") << " hidden units, " << (relu_or_gelu ? "gelu" : "relu"));
    auto run = [&](bool fuse) {
      switch (kind) {
        case 0: return bits(ffn_relu, fuse);
        case 1: return bits(ffn_gelu, fuse);
        case 2: return bits(wide_relu, fuse);
        default: return bits(wide_gelu, fuse);
      }
    };
    const auto [fused, fused_ops] = run(true);
    const auto [unfused, unfused_ops] = run(false);
    CHECK(fused_ops.count(relu_or_gelu == 0 ? "linear_relu" : "linear_gelu") == 1);
    CHECK(fused_ops.count("linear") == 1);
    CHECK(fused_ops.count("add") == 0);
    CHECK(unfused_ops.count("linear") == 0);
    REQUIRE(fused.size() == unfused.size());
    CHECK(std::memcmp(fused.data(), unfused.data(), fused.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("a residual added to a linear layer joins its node, either order, with the unfused bits, in float and in "
          "bf16") {
  const auto precision = GENERATE(compute_precision::f32, compute_precision::bf16);
  INFO("precision " << (precision == compute_precision::bf16 ? "bf16" : "f32"));
  using R = input_node<"r", shape<dyn<"B">, dyn<"T">, fix<D>>>;
  using Row = input_node<"row", shape<fix<1>, fix<1>, fix<D>>>;
  auto x = test::random_tensor<float>({3, 70, D}, 41);
  auto r = test::random_tensor<float>({3, 70, D}, 42);
  auto row = test::random_tensor<float>({1, 1, D}, 43);
  // outputs, every parameter gradient and the inputs' gradients, fused or not, and the plan's ops
  auto bits = [&](const auto& g, std::vector<feed> feeds, bool fuse) {
    auto p = g.template make_params<float>(7);
    auto ex = g.template executor<float>(p, {.input_grads = true, .fuse = fuse, .precision = precision});
    ex.forward(feeds);
    ex.backward();
    std::vector<float> all{ex.output()[0]};
    for (auto& [name, e] : p) all.insert(all.end(), e.grad.values().begin(), e.grad.values().end());
    for (const feed& f : feeds) {
      auto gi = ex.input_grad(f.name());
      all.insert(all.end(), gi.data, gi.data + gi.size());
    }
    return std::make_pair(all, ops_of(ex.plan()));
  };
  auto same = [&](const auto& g, int residuals, int adds, std::vector<feed> feeds) {
    const auto [fused, fused_ops] = bits(g, feeds, true);
    const auto [unfused, unfused_ops] = bits(g, feeds, false);
    CHECK(fused_ops.count("linear_residual") == static_cast<std::size_t>(residuals));
    CHECK(fused_ops.count("add") == static_cast<std::size_t>(adds));
    CHECK(unfused_ops.count("linear_residual") == 0);
    REQUIRE(fused.size() == unfused.size());
    CHECK(std::memcmp(fused.data(), unfused.data(), fused.size() * sizeof(float)) == 0);
  };
  SECTION("a Transformer feed-forward sublayer: r + linear(relu(linear(x)))") {
    same(make_graph(sum(R{} + nn::linear<"l2", D>(relu(nn::linear<"l1", 24>(X{}))))), 1, 0, {{"x", x}, {"r", r}});
  }
  SECTION("the other order: linear(x) + r") {
    same(make_graph(sum(nn::linear<"l", D>(X{}) + R{})), 1, 0, {{"x", x}, {"r", r}});
  }
  SECTION("the layer's own input as the residual: x + linear(x) (one gradient buffer, two contributions)") {
    const auto g = make_graph(sum(X{} + nn::linear<"l", D>(X{})));
    same(g, 1, 0, {{"x", x}});
    auto p = g.make_params<double>(8);  // and against finite differences, in double
    test::require_gradcheck(g, p, {{"x", test::random_tensor<double>({2, 3, D}, 44)}}, {.fuse = 1});
  }
  SECTION("two residuals in a row, the second over the first's output") {
    auto h = X{} + nn::linear<"l1", D>(X{});
    same(make_graph(sum(h + nn::linear<"l2", D>(h))), 2, 0, {{"x", x}});
  }
  SECTION("a residual over a computed value, as in a Transformer's second sublayer: its gradient is the output's") {
    // h = x + linear(x); y = h + linear(relu(linear(h))): h's gradient starts as y's gradient
    // (dr = dy), so the planner lets them share one buffer (backward in place, input 3), which
    // the first linear of the sublayer then adds its dx to
    auto h = X{} + nn::linear<"l0", D>(X{});
    const auto g = make_graph(sum(h + nn::linear<"l2", D>(relu(nn::linear<"l1", 24>(h)))));
    same(g, 2, 0, {{"x", x}});
    auto p = g.make_params<float>(7);
    auto ex = g.executor<float>(p, {.input_grads = true});
    const memory_report plan = ex.memory_plan({{"B", 3}, {"T", 70}});
    int shared = 0;  // gradient buffers of a linear_residual shared with another node's
    for (const auto& b : plan.buffers)
      shared += b.grad && b.what.find("linear_residual") != std::string::npos && b.what.find("more") != std::string::npos;
    INFO(plan.str(40));
    CHECK(shared >= 1);
    auto pd = g.make_params<double>(8);  // and against finite differences, in double
    test::require_gradcheck(g, pd, {{"x", test::random_tensor<double>({2, 3, D}, 45)}}, {.fuse = 1});
  }
  SECTION("layers of 40 and 48 outputs, whose bias, relu and residual loom's GEMM adds in its tiles") {
    // (float, AVX-512: 16 or more outputs and more than one row; the layers above have 8 and
    // 24) 40 = a panel of 32 and a ragged one, 210 rows = tiles of 8 and a ragged one
    using XW = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<40>>>;
    auto h = XW{} + nn::linear<"l0", 40>(XW{});
    const auto g = make_graph(sum(h + nn::linear<"l2", 40>(relu(nn::linear<"l1", 48>(h)))));
    same(g, 2, 0, {{"x", test::random_tensor<float>({3, 70, 40}, 46)}});
    same(make_graph(sum(relu(nn::linear<"l", 40>(XW{})))), 0, 0, {{"x", test::random_tensor<float>({3, 70, 40}, 47)}});
  }
  SECTION("a broadcast residual stays an add after a plain linear") {
    same(make_graph(sum(nn::linear<"l", D>(X{}) + Row{})), 0, 1, {{"x", x}, {"row", row}});
  }
}

TEST_CASE("a fused linear layer used twice adds its second gradients to the first, as unfused") {
  // the same layer (one weight and bias) on x and on x ⊙ x: the second backward adds to the
  // bias gradient the first one stored (24 outputs: a whole vector of 16 and a tail); the sum
  // makes the second a linear with a residual (the first's output)
  auto g = make_graph(sum(relu(nn::linear<"l", 24>(X{})) + nn::linear<"l", 24>(mul(X{}, X{}))));
  auto x = test::random_tensor<float>({3, 70, D}, 31);
  auto bits = [&](bool fuse) {
    auto p = g.make_params<float>(5);
    auto ex = g.executor<float>(p, {.fuse = fuse});
    ex.forward({{"x", x}});
    ex.backward();
    std::vector<float> all;
    for (auto& [name, e] : p) all.insert(all.end(), e.grad.values().begin(), e.grad.values().end());
    return std::make_pair(all, ops_of(ex.plan()));
  };
  const auto [fused, fused_ops] = bits(true);
  const auto [unfused, unfused_ops] = bits(false);
  CHECK(fused_ops.count("linear_relu") == 1);
  CHECK(fused_ops.count("linear_residual") == 1);
  CHECK(fused_ops.count("add") == 0);
  CHECK(unfused_ops.count("linear_residual") == 0);
  REQUIRE(fused.size() == unfused.size());
  CHECK(std::memcmp(fused.data(), unfused.data(), fused.size() * sizeof(float)) == 0);
}

TEMPLATE_TEST_CASE_SIG("fused attention adds float masks [T, S], [B, 1, T, S], [B, H, T, S] and gives their gradients",
                       "", ((int H), H), 1, 2) {
  auto x = test::random_tensor<double>({2, 5, D}, 14);
  auto with_inf = [](tensor<double> m) {
    m[2] = -std::numeric_limits<double>::infinity();  // a hidden key, PyTorch's float-mask way
    return m;
  };
  SECTION("[T, S]") {
    auto f = input<"f", shape<dyn<"T">, dyn<"T">>>();
    require_fused_equals_unfused(make_graph(nn::self_attention<"a", H>(X{}, nn::causal, nn::additive(f))),
                                 {{"x", x}, {"f", with_inf(test::random_tensor<double>({5, 5}, 15))}});
  }
  SECTION("[B, 1, T, S]") {
    auto f = input<"f", shape<dyn<"B">, fix<1>, dyn<"T">, dyn<"T">>>();
    require_fused_equals_unfused(make_graph(nn::self_attention<"a", H>(X{}, nn::additive(f))),
                                 {{"x", x}, {"f", test::random_tensor<double>({2, 1, 5, 5}, 16, -2, 2)}});
  }
  SECTION("[B, H, T, S] after a padding mask") {
    auto f = input<"f", shape<dyn<"B">, fix<H>, dyn<"T">, dyn<"T">>>();
    require_fused_equals_unfused(make_graph(nn::self_attention<"a", H>(X{}, nn::padding(Len{}), nn::additive(f))),
                                 {{"x", x}, {"len", ints({2}, {5, 3})}, {"f", test::random_tensor<double>({2, H, 5, 5}, 17)}});
  }
  SECTION("[B, T, S] per sequence, bool and float") {
    auto f = input<"f", shape<dyn<"B">, dyn<"T">, dyn<"T">>>();
    auto m = input<"m", shape<dyn<"B">, dyn<"T">, dyn<"T">>, bool>();
    tensor<std::uint8_t> ms(dims_t{2, 5, 5});
    for (std::int64_t i = 0; i < ms.size(); ++i) ms[i] = static_cast<std::uint8_t>((i * 7) % 4 != 0);
    require_fused_equals_unfused(make_graph(nn::self_attention<"a", H>(X{}, nn::allowed(m), nn::additive(f))),
                                 {{"x", x}, {"m", ms}, {"f", test::random_tensor<double>({2, 5, 5}, 18)}});
  }
}

TEMPLATE_TEST_CASE_SIG("fused grouped-query and multi-query attention equal the primitives, keys read in place", "",
                       ((long Hq, long Hkv), Hq, Hkv), (4, 2), (4, 1), (8, 2)) {
  auto q = input<"q", shape<dyn<"B">, fix<Hq>, dyn<"T">, fix<4>>>();
  auto k = input<"k", shape<dyn<"B">, fix<Hkv>, dyn<"S">, fix<4>>>();
  auto v = input<"v", shape<dyn<"B">, fix<Hkv>, dyn<"S">, fix<3>>>();
  auto f = input<"f", shape<dyn<"B">, fix<Hq>, dyn<"T">, dyn<"S">>>();
  auto g = make_graph(nn::attention<{.scale = 0.3, .is_causal = true, .enable_gqa = true}>(q, k, v, nn::padding(Len{}),
                                                                                          nn::additive(f)));
  require_fused_equals_unfused(g, {{"q", test::random_tensor<double>({2, Hq, 3, 4}, 19)},
                                   {"k", test::random_tensor<double>({2, Hkv, 6, 4}, 20)},
                                   {"v", test::random_tensor<double>({2, Hkv, 6, 3}, 21)},
                                   {"len", ints({2}, {6, 4})},
                                   {"f", test::random_tensor<double>({2, Hq, 3, 6}, 22)}});
}

TEST_CASE("fused dropout on the weights drops the same weights as the unfused dropout node, in training") {
  auto seed = input<"seed", shape<fix<2>>, int>();
  auto x = test::random_tensor<double>({2, 5, D}, 23);
  SECTION("multi-head self-attention") {
    require_fused_equals_unfused(
        make_graph(nn::self_attention<"a", 2, {.dropout = 0.3}>(X{}, nn::causal, nn::dropout_seed(seed))),
        {{"x", x}, {"seed", ints({2}, {3, 4})}});
  }
  SECTION("grouped queries, a float mask and padding") {
    auto q = input<"q", shape<dyn<"B">, fix<4>, dyn<"T">, fix<4>>>();
    auto k = input<"k", shape<dyn<"B">, fix<2>, dyn<"S">, fix<4>>>();
    auto v = input<"v", shape<dyn<"B">, fix<2>, dyn<"S">, fix<3>>>();
    auto f = input<"f", shape<dyn<"T">, dyn<"S">>>();
    require_fused_equals_unfused(
        make_graph(nn::attention<{.dropout = 0.5, .enable_gqa = true}>(q, k, v, nn::padding(Len{}), nn::additive(f),
                                                                       nn::dropout_seed(seed))),
        {{"q", test::random_tensor<double>({2, 4, 3, 4}, 24)},
         {"k", test::random_tensor<double>({2, 2, 6, 4}, 25)},
         {"v", test::random_tensor<double>({2, 2, 6, 3}, 26)},
         {"len", ints({2}, {6, 4})},
         {"f", test::random_tensor<double>({3, 6}, 27)},
         {"seed", ints({2}, {9, 1})}});
  }
  SECTION("not training: no dropout, fused or not") {
    auto g = make_graph(nn::self_attention<"a", 2, {.dropout = 0.3}>(X{}, nn::dropout_seed(seed)));
    auto plain = make_graph(nn::self_attention<"a", 2>(X{}));
    auto p = g.make_params<double>(1);
    std::vector<double> outs;
    for (bool fuse : {false, true}) {
      auto ex = g.executor<double>(p, {.training = false, .fuse = fuse});
      ex.forward({{"x", x}, {"seed", ints({2}, {3, 4})}});
      auto ref = plain.executor<double>(p, {.fuse = false});
      ref.forward({{"x", x}});
      CHECK(max_rel(std::vector<double>(ex.output().data, ex.output().data + ex.output().size()),
                    std::vector<double>(ref.output().data, ref.output().data + ref.output().size())) <= 1e-12);
    }
  }
}
