// A language model's head and its loss, cross_entropy(x wᵀ (+ b), target), forward + backward,
// fused (one linear_cross_entropy node: row chunks, no [N, V] logits kept) against unfused
// (matmul, add, cross_entropy) in one process, rounds alternated. Prints one JSON line per case
// and variant: the median time and the memory plan's peak. scripts/bench_lm_head.py runs it
// beside PyTorch's F.cross_entropy(F.linear(x, w, b), t) on the same shapes.
//
//   head_v32000   N = 2048 rows (B 8 × T 256), K = 256, V = 32000, no bias (a GPT-style head):
//                 eight chunks of 256 rows
//   head_v1000    N = 1024 rows (B 16 × T 64), K = 256, V = 1000, bias (bench_vs_torch's small
//                 model's head): one chunk
//
//   bench_lm_head [--threads N] [--reps R] [--case NAME] [--variant fused|unfused]
//                 R timed rounds after 2 warm-up ones (one variant alone: for a profiler)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.hpp"
#include "loom/nn/linear.hpp"

using namespace loom;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <long K, long V, bool Bias>
void run_case(const char* name, std::int64_t b, std::int64_t t, int threads, int reps, const std::string& only) {
  using X = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<K>>>;
  using Target = input_node<"t", shape<dyn<"B">, dyn<"T">>, int>;
  auto g = make_graph(cross_entropy(nn::linear<"head", V, Bias>(X{}), Target{}));
  auto params = g.template make_params<float>(1);
  rng gen(2);
  tensor<float> x(dims_t{b, t, K});
  for (auto& e : x.values()) e = static_cast<float>(gen.uniform() * 2 - 1);
  tensor<std::int32_t> target(dims_t{b, t});
  for (auto& e : target.values()) e = static_cast<std::int32_t>(gen.below(V));
  const std::pair<std::string_view, std::int64_t> dims[] = {{"B", b}, {"T", t}};
  executor<float> fused = g.template executor<float>(params, {.threads = threads, .input_grads = true, .fuse = true});
  executor<float> unfused = g.template executor<float>(params, {.threads = threads, .input_grads = true, .fuse = false});
  executor<float>* ex[2] = {&fused, &unfused};
  std::vector<double> times[2];
  float loss[2] = {0, 0};
  const bool run[2] = {only != "unfused", only != "fused"};
  for (int r = 0; r < reps + 2; ++r)
    for (int v = 0; v < 2; ++v) {
      if (!run[v]) continue;
      const double t0 = now();
      ex[v]->forward({{"x", x}, {"t", target}});
      ex[v]->backward();
      if (r >= 2) times[v].push_back(now() - t0);
      loss[v] = ex[v]->output()[0];
    }
  const double flop = 6.0 * static_cast<double>(b * t) * K * V;  // x wᵀ, g w, gᵀ x
  for (int v = 0; v < 2; ++v) {
    if (!run[v]) continue;
    const double ms = 1e3 * median(times[v]);
    const double peak = static_cast<double>(ex[v]->memory_plan(dims).peak_bytes) / (1 << 20);
    std::printf("{\"case\": \"%s\", \"variant\": \"%s\", \"threads\": %d, \"ms\": %.3f, \"gflops\": %.1f, "
                "\"peak_mib\": %.1f, \"loss\": %.6f}\n",
                name, v == 0 ? "fused" : "unfused", threads, ms, flop / ms * 1e-6, peak, loss[v]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 7;
  std::string only, variant;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::stoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--reps") == 0) reps = std::stoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--case") == 0) only = argv[i + 1];
    else if (std::strcmp(argv[i], "--variant") == 0) variant = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: bench_lm_head [--threads N] [--reps R] [--case NAME] [--variant fused|unfused]\n");
      return 2;
    }
  }
  if (argc % 2 == 0 || threads < 1 || reps < 1 || (!variant.empty() && variant != "fused" && variant != "unfused")) {
    std::fprintf(stderr, "usage: bench_lm_head [--threads N] [--reps R] [--case NAME] [--variant fused|unfused]\n");
    return 2;
  }
  if (only.empty() || only == "head_v32000") run_case<256, 32000, false>("head_v32000", 8, 256, threads, reps, variant);
  if (only.empty() || only == "head_v1000") run_case<256, 1000, true>("head_v1000", 16, 64, threads, reps, variant);
  return 0;
}
