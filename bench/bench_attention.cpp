// Multi-head self-attention, float: forward, and forward + backward, at 1 and 2 threads, each
// fused (the plan's one attention node) and unfused (the primitives as written), with the
// arena each needs.
//
//   x [B, T, d] -> nn::self_attention<"attn", h>(x) -> [B, T, d]
//
// Each benchmark reports its wall time (UseRealTime: the work runs on TBB's threads, so the
// calling thread's CPU time means nothing) as the median and the fastest of 5 repetitions (on a
// machine shared with other work, the fastest is the least disturbed), and a GFLOP rate
// counted analytically (see attention_flops), so that the figure is comparable across
// implementations that do more or less redundant work.
//
//   bench_attention [Google Benchmark flags, e.g. --benchmark_filter=fwd]
#include <benchmark/benchmark.h>

#include "bench_support.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"

namespace {

/// Multiply-adds of multi-head attention forward, as FLOPs (one multiply-add = 2 FLOPs):
///   QKV projection  x [B·T, d] · W_inᵀ [d, 3d]    2·B·T·d·3d
///   scores          q kᵀ per (batch, head)        2·B·T·T·d   (h heads of d/h each)
///   weights · V     per (batch, head)             2·B·T·T·d
///   out projection  [B·T, d] · W_outᵀ [d, d]      2·B·T·d·d
/// Biases, scaling, softmax and head reshuffles are O(B·T·d + B·h·T·T) and left out.
/// The backward pass does two GEMMs for each forward GEMM, so forward + backward ≈ 3× forward.
double attention_flops(std::int64_t b, std::int64_t t, std::int64_t d) {
  const double B = static_cast<double>(b), T = static_cast<double>(t), D = static_cast<double>(d);
  return 2 * B * T * D * 3 * D + 2 * B * T * T * D + 2 * B * T * T * D + 2 * B * T * D * D;
}

template <long D>
auto x_input() {
  return loom::input<"x", loom::shape<loom::dyn<"B">, loom::dyn<"T">, loom::fix<D>>>();
}

/// x [B, T, d]: seeded uniform(-1, 1).
loom::tensor<float> random_x(std::int64_t b, std::int64_t t, std::int64_t d) {
  loom::rng gen(7);
  loom::tensor<float> x({b, t, d});
  for (float& v : x.values()) v = static_cast<float>(gen.uniform(-1, 1));
  return x;
}

template <long D, int H, bool Causal>
auto attention_graph() {
  if constexpr (Causal) return loom::nn::self_attention<"attn", H>(x_input<D>(), loom::nn::causal);  // [B, T, d]
  else return loom::nn::self_attention<"attn", H>(x_input<D>());
}

/// The arena of the run's memory plan, in MiB (what fusion saves shows here).
template <class Run>
double arena_mib(const Run& run) {
  return static_cast<double>(run.planned_bytes()) / (1 << 20);
}

template <long D, int H, bool Causal>
void attention_forward(benchmark::State& state, std::int64_t b, std::int64_t t, int threads, bool fuse) {
  auto g = loom::make_graph(attention_graph<D, H, Causal>());
  auto params = g.template make_params<float>(42);
  auto run = g.template executor<float>(params, {.threads = threads, .inference = true, .fuse = fuse});
  const auto x = random_x(b, t, D);

  run.forward({{"x", x}});  // warm-up: allocates the arena, faults its pages in, warms caches
  for (auto _ : state) {
    run.forward({{"x", x}});
    benchmark::DoNotOptimize(run.output().data);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] =
      benchmark::Counter(attention_flops(b, t, D) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["arena_MiB"] = arena_mib(run);
}

template <long D, int H, bool Causal>
void attention_forward_backward(benchmark::State& state, std::int64_t b, std::int64_t t, int threads, bool fuse) {
  // a scalar loss, so that backward() has a start; the sum adds B·T·d additions forward and
  // backward, negligible next to the GEMMs
  auto g = loom::make_graph(loom::sum(attention_graph<D, H, Causal>()));
  auto params = g.template make_params<float>(42);
  auto run = g.template executor<float>(params, {.threads = threads, .fuse = fuse});
  const auto x = random_x(b, t, D);

  run.forward({{"x", x}});  // warm-up
  run.backward();
  for (auto _ : state) {
    run.forward({{"x", x}});
    run.backward();
    benchmark::DoNotOptimize(params.grad("attn.in_proj_weight").data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] =
      benchmark::Counter(3 * attention_flops(b, t, D) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["arena_MiB"] = arena_mib(run);
}

using bench_fn = void (*)(benchmark::State&, std::int64_t, std::int64_t, int, bool);

/// Registers `fn` as "<kind>/B=..,T=..,d=..,h=../fused|unfused/threads=n" for n = 1, 2: the
/// fused plan (one attention node) and the primitives as written, side by side.
void register_case(const char* kind, bench_fn fn, std::int64_t b, std::int64_t t, long d, int h) {
  for (int threads : {1, 2})
    for (bool fuse : {true, false}) {
      std::string name = std::string(kind) + "/B=" + std::to_string(b) + ",T=" + std::to_string(t) +
                         ",d=" + std::to_string(d) + ",h=" + std::to_string(h) + (fuse ? "/fused" : "/unfused") +
                         "/threads=" + std::to_string(threads);
      bench::measured(benchmark::RegisterBenchmark(name.c_str(), fn, b, t, threads, fuse), benchmark::kMillisecond);
    }
}

}  // namespace

int main(int argc, char** argv) {
  // the tiny training model's attention, the shapes of scripts/bench_vs_torch, then longer
  // sequences and causal masks
  register_case("mha_fwd", attention_forward<64, 4, false>, 32, 16, 64, 4);
  register_case("mha_fwd_bwd", attention_forward_backward<64, 4, false>, 32, 16, 64, 4);
  register_case("mha_fwd", attention_forward<64, 4, false>, 8, 32, 64, 4);
  register_case("mha_fwd_bwd", attention_forward_backward<64, 4, false>, 8, 32, 64, 4);
  register_case("mha_fwd", attention_forward<128, 4, false>, 8, 128, 128, 4);
  register_case("mha_fwd_bwd", attention_forward_backward<128, 4, false>, 8, 128, 128, 4);
  register_case("mha_fwd", attention_forward<256, 8, false>, 4, 512, 256, 8);
  register_case("mha_fwd_bwd", attention_forward_backward<256, 8, false>, 4, 512, 256, 8);
  register_case("mha_fwd", attention_forward<512, 8, false>, 1, 1024, 512, 8);
  register_case("mha_fwd_bwd", attention_forward_backward<512, 8, false>, 1, 1024, 512, 8);
  register_case("mha_causal_fwd", attention_forward<512, 8, true>, 1, 1024, 512, 8);
  register_case("mha_causal_fwd_bwd", attention_forward_backward<512, 8, true>, 1, 1024, 512, 8);
  register_case("mha_causal_fwd", attention_forward<512, 8, true>, 1, 2048, 512, 8);
  register_case("mha_causal_fwd_bwd", attention_forward_backward<512, 8, true>, 1, 2048, 512, 8);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
