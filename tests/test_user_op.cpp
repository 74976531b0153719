// An op declared the way a project outside loom declares one (op_def, public kernel interface)
// works in every kind of graph: around the fused attention, in KV-cached decoding (prefill +
// one-token steps equal the full forward), and inside a recomputed checkpoint block.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string_view>

#include "loom/core/kernel.hpp"
#include "loom/core/parallel.hpp"
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "loom/nn/kv_cache.hpp"
#include "test_support.hpp"

namespace project {  // not loom's namespace: only the public interface

// softsign(x) = x / (1 + |x|);  backward: dx (+)= dy / (1 + |x|)²
struct softsign_op : loom::op_def<softsign_op> {
  static constexpr std::string_view name = "project.softsign";
  static constexpr loom::op_traits traits{.writes_fresh = true, .backward_reads = loom::reads({0})};
  template <class S>
  using rule = loom::same_shape<S>;
  template <class T>
  static void forward(const loom::op_args<T>& a) {
    const T* x = a.input(0);
    loom::for_chunks(a.out_dims.size(), 4096, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) a.out[i] = x[i] / (1 + std::abs(x[i]));
    });
  }
  template <class T>
  static void backward(const loom::op_args<T>& a) {
    T* dx = a.grad(0);
    if (!dx) return;
    const T* x = a.input(0);
    loom::with_fresh(a.fresh(0), [&](auto fresh) {
      for (std::int64_t i = 0; i < a.out_dims.size(); ++i)
        loom::put<fresh()>(dx[i], a.dout[i] / ((1 + std::abs(x[i])) * (1 + std::abs(x[i]))));
    });
  }
};
inline constexpr loom::op_fn<softsign_op> softsign{};

}  // namespace project

using namespace loom;

namespace {

constexpr long D = 8;
using X = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>;

// softsign on the layer's input, then causal self-attention (fused in training), residual.
template <bool Cached>
auto layer() {
  auto h = project::softsign(X{});
  if constexpr (Cached) return add(nn::self_attention_cached<"attn", 2>(h, nn::causal), X{});
  else return add(nn::self_attention<"attn", 2>(h, nn::causal), X{});
}

bool runs(const plan_view& plan, std::string_view op) {
  for (int i = 0; i < plan.size(); ++i)
    if (plan.order[i]->op->name == op) return true;
  return false;
}

}  // namespace

TEST_CASE("a project's op registers, runs beside the fused attention and passes gradcheck") {
  const auto& ops = registered_ops();
  CHECK(std::find(ops.begin(), ops.end(), &entry_of<project::softsign_op>) != ops.end());
  CHECK(entry_of<project::softsign_op>.id == op_id("project.softsign"));
  auto g = make_graph(sum(layer<false>()));
  auto params = g.make_params<double>(1);
  test::randomize(params, 2);
  auto ex = g.executor<double>(params);
  CHECK(runs(ex.plan(), "project.softsign"));
  CHECK(runs(ex.plan(), "attention"));  // the fusion still finds its pattern after the user op
  const std::vector<feed> feeds{{"x", test::random_tensor<double>({2, 5, D}, 3)}};
  const gradcheck_result r = gradcheck(ex.plan(), params, feeds);
  INFO(r.str());
  CHECK(r.checked > 0);
  CHECK(r.ok);
}

TEST_CASE("a project's op in KV-cached decoding: prefill and one-token steps equal the full forward") {
  auto full = make_graph(layer<false>());
  auto step = make_graph(layer<true>());
  auto params = full.make_params<double>(1);
  test::randomize(params, 4);
  const std::int64_t B = 2, T = 6;
  auto x = test::random_tensor<double>({B, T, D}, 5);
  auto run_full = full.executor<double>(params);
  run_full.forward({{"x", x}});
  const tensor<double> want(run_full.output());

  nn::kv_cache<double> cache(step, B, T);
  auto run = step.executor<double>(params, {.inference = true});
  std::int64_t t0 = 0;
  double worst = 0;
  for (std::int64_t n : {3, 1, 1, 1}) {
    tensor<double> xs(dims_t{B, n, D});
    for (std::int64_t b = 0; b < B; ++b)
      std::copy(x.data() + (b * T + t0) * D, x.data() + (b * T + t0 + n) * D, xs.data() + b * n * D);
    REQUIRE(nn::decode_step(run, cache, {{"x", xs}}) == n);
    auto got = run.output();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < n * D; ++i)
        worst = std::max(worst, std::abs(got[b * n * D + i] - want[(b * T + t0) * D + i]));
    t0 += n;
  }
  CHECK(worst <= 1e-12);
}

TEST_CASE("a project's op inside a recomputed checkpoint block gives the kept block's gradients") {
  auto x = input<"x", shape<dyn<"N">, fix<4>>>();
  auto w = param<"w", shape<fix<4>, fix<4>>, init<init_kind::linear_weight>>();
  auto block = project::softsign(matmul<false, true>(x, w));
  auto g = make_graph(sum(mul(checkpoint(mul(block, block), x), x)));
  auto params = g.make_params<double>(6);
  const tensor<double> xs = test::random_tensor<double>({3, 4}, 7);
  auto grads = [&](bool recompute) {
    auto ex = g.executor<double>(params, {.recompute = recompute});
    ex.forward({{"x", xs}});
    ex.backward();
    return params.grad("w").values();
  };
  const auto kept = grads(false);
  const auto recomputed = grads(true);
  REQUIRE(kept.size() == recomputed.size());
  for (std::size_t i = 0; i < kept.size(); ++i) CHECK(recomputed[i] == kept[i]);
  // the block really is recomputed: its interior is not kept for backward
  CHECK(g.memory_plan<double>({{"N", 64}}, {.recompute = true}).peak_bytes <
        g.memory_plan<double>({{"N", 64}}, {.recompute = false}).peak_bytes);
}
