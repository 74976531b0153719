// The executor's per-node overhead: forward() of a chain of tiny nodes on [4, 4] tensors,
//
//   y_0 = x,  y_{i+1} = 0.5 · y_i + c        (a scale node and an add node per step)
//
// at 1 and 2 threads, reported as wall time per computed node ("per_node", in the console as
// e.g. 250ns). Each node does 16 multiplies or adds, a few nanoseconds of arithmetic, so the
// figure is almost all overhead: the executor binding the inputs, checking shapes and
// scheduling the nodes. loom's goal is that a graph of a few hundred tiny nodes not spend more
// time scheduling than computing; `chain_plain_loop` is the same arithmetic written as a plain
// loop, the compute time to compare with. Chains of 20, 100 and 300 nodes separate the fixed
// cost of a forward() from the cost of each node.
//
//   bench_overhead [Google Benchmark flags]
#include <benchmark/benchmark.h>

#include "bench_support.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/loom.hpp"

namespace {

using tiny = loom::shape<loom::fix<4>, loom::fix<4>>;

constexpr int nodes_per_block = 20;

/// Ten steps y -> 0.5 · y + c: 20 nodes. A named block, so that the type of a long chain
/// grows by one short block name per 20 nodes (docs/design-notes.md, "Node types and descriptors").
struct ten_steps {
  template <int N = 10, class Y>
  static constexpr auto steps(Y y) {
    if constexpr (N == 0)
      return y;
    else
      return steps<N - 1>(loom::add(loom::scale<0.5>(y), loom::input<"c", tiny>()));
  }
  template <class X>
  constexpr auto operator()(X x) const {
    return steps(x);
  }
};

/// Blocks × 20 nodes after x.
template <int Blocks, class X>
constexpr auto chain(X x) {
  if constexpr (Blocks == 0)
    return x;
  else
    return chain<Blocks - 1>(loom::make_block(ten_steps{}, x));
}

loom::tensor<float> filled(float v) {
  loom::tensor<float> t({4, 4});
  t.fill(v);
  return t;
}

template <int Blocks>
void chain_forward(benchmark::State& state, int threads) {
  auto g = loom::make_graph(chain<Blocks>(loom::input<"x", tiny>()));
  static_assert(decltype(g)::size() == Blocks * nodes_per_block + 2, "the chain has x, c and 20 nodes per block");
  loom::param_store<float> params;  // the chain has no parameters
  auto run = g.template executor<float>(params, {.threads = threads});
  const auto x = filled(1.0f), c = filled(0.25f);

  run.forward({{"x", x}, {"c", c}});  // warm-up: allocates the arena
  for (auto _ : state) {
    run.forward({{"x", x}, {"c", c}});
    benchmark::DoNotOptimize(run.output().data);
    benchmark::ClobberMemory();
  }
  const double nodes = Blocks * nodes_per_block;
  state.counters["nodes"] = nodes;
  state.counters["per_node"] =
      benchmark::Counter(nodes, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

/// The chain's arithmetic without a graph: 300 nodes' worth of 16-element scale and add.
void chain_plain_loop(benchmark::State& state) {
  constexpr int steps = 150;
  std::array<float, 16> y{}, c{};
  for (auto _ : state) {
    y.fill(1.0f);
    c.fill(0.25f);
    benchmark::ClobberMemory();  // c is "fed" anew each time, as in the graph
    for (int s = 0; s < steps; ++s) {
      for (float& v : y) v *= 0.5f;
      benchmark::ClobberMemory();  // keep each step a separate pass, as separate nodes are
      for (int i = 0; i < 16; ++i) y[i] += c[i];
      benchmark::ClobberMemory();
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["nodes"] = 2 * steps;
  state.counters["per_node"] =
      benchmark::Counter(2 * steps, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

template <int Blocks>
void register_chain() {
  for (int threads : {1, 2}) {
    std::string name =
        "chain_forward/nodes=" + std::to_string(Blocks * nodes_per_block) + "/threads=" + std::to_string(threads);
    bench::measured(benchmark::RegisterBenchmark(name.c_str(), chain_forward<Blocks>, threads), benchmark::kMicrosecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_chain<1>();   // 20 nodes
  register_chain<5>();   // 100 nodes
  register_chain<15>();  // 300 nodes
  bench::measured(benchmark::RegisterBenchmark("chain_plain_loop/nodes=300", chain_plain_loop), benchmark::kMicrosecond);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
