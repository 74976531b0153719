// Decoding with a KV cache vs recomputing the whole prefix, per generated token.
//
// A 2-layer decoder-only Transformer (d = 256, h = 8, ffn 1024, vocab 1000, batch 1, random
// weights, greedy), after a 16-token prompt, generating 128 and 512 tokens:
//   cached:     one step graph (self_attention_cached), one new position per step
//   recompute:  the full causal model over prompt + generated tokens at every step
// Prints per-token latency of both, their ratio, and the per-token cost by position (it
// grows linearly with the cache length for attention when cached; the whole prefix is
// recomputed otherwise). Cached figures are the median of 5 runs after a warm-up.
//
//   bench_decode [--threads N] [--quick] [--cached-only]   (--cached-only: no recomputation, for profiling)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/transformer.hpp"

using namespace loom;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr nn::transformer_config cfg{.d_model = 256, .heads = 8, .ffn = 1024, .decoder_layers = 2, .tgt_vocab = 1000};
using full_model = nn::language_model<cfg, nn::eval_mode>;
using step_model = nn::language_model<cfg, nn::decode_mode>;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per-step seconds of cached greedy decoding of n tokens after the prompt.
std::vector<double> cached_steps(executor<float>& run, nn::kv_cache<float>& cache, const std::vector<int>& prompt,
                                 int n, std::vector<int>* tokens) {
  std::vector<double> per_step;
  auto last = clock_type::now();
  nn::generate_options o{.max_new_tokens = n};
  auto r = nn::generate(run, cache, {prompt}, o, {}, [&](std::size_t, int) {
    per_step.push_back(seconds_since(last));
    last = clock_type::now();
  });
  if (tokens) *tokens = r.tokens[0];
  per_step.erase(per_step.begin());  // the prefill
  return per_step;
}

// Per-step seconds of greedy decoding that recomputes the whole prefix each step.
std::vector<double> recompute_steps(executor<float>& run, std::vector<int> seq, int n, std::vector<int>* tokens) {
  std::vector<double> per_step;
  for (int s = 0; s < n; ++s) {
    auto t = clock_type::now();
    tensor<std::int32_t> toks(dims_t{1, static_cast<std::int64_t>(seq.size())});
    for (std::size_t i = 0; i < seq.size(); ++i) toks[static_cast<std::int64_t>(i)] = seq[i];
    run.forward({{"tokens", toks}});
    auto logits = run.output();
    const std::int64_t v = logits.dims[-1];
    std::span<const float> last(logits.data + (static_cast<std::int64_t>(seq.size()) - 1) * v,
                                static_cast<std::size_t>(v));
    seq.push_back(nn::pick_token<float>(last, 0.0, 0, 0.0));
    if (s > 0) per_step.push_back(seconds_since(t));  // step 0 is the prefill of the cached run
    if (tokens) tokens->push_back(seq.back());
  }
  return per_step;
}

double mean(const std::vector<double>& v, std::size_t from, std::size_t to) {
  double s = 0;
  for (std::size_t i = from; i < to; ++i) s += v[i];
  return s / static_cast<double>(to - from);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  bool quick = false, cached_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::stoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--cached-only")) cached_only = true;
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--quick] [--cached-only]\n", argv[0]);
      return 2;
    }
  }
  auto full = make_graph(full_model::logits());
  auto step = make_graph(step_model::logits());
  auto params = full.make_params<float>(1);
  auto run_full = full.executor<float>(params, {.threads = threads, .inference = true});
  auto run_step = step.executor<float>(params, {.threads = threads, .inference = true});
  std::vector<int> prompt;
  for (int i = 0; i < 16; ++i) prompt.push_back((i * 37 + 11) % 1000);

  std::printf("decoder-only, 2 layers, d=256, h=8, ffn 1024, vocab 1000, batch 1, prompt 16, %d thread(s)\n\n",
              run_step.threads());
  std::printf("%10s %14s %16s %8s %12s\n", "new tokens", "cached ms/tok", "recompute ms/tok", "ratio", "cache memory");
  std::vector<double> cached_512, recompute_512;
  for (int n : {128, 512}) {
    nn::kv_cache<float> cache(step, 1, 16 + n);
    std::vector<int> cached_tokens, recomputed_tokens;
    // warm-up of at least a second: OpenBLAS's idle thread spins for about 0.1 s after the
    // library loads, on a core that the second executor thread needs; and with a quarter second
    // the first figure (128 tokens, ~70 ms of timed steps) was often in a slow state the process
    // leaves later: at 1 thread it came out above the 512-token figure of the same process (which
    // cannot be: a step's cost grows with the position) in 4 of 14 runs, with 1 s in none of 14
    // [AMD EPYC Zen 4]
    for (auto t0 = clock_type::now(); seconds_since(t0) < 1.0;) cached_steps(run_step, cache, prompt, 8, nullptr);
    std::vector<double> runs;
    std::vector<std::vector<double>> steps;  // per repetition, per step
    for (int rep = 0; rep < (quick ? 1 : 5); ++rep) {
      steps.push_back(cached_steps(run_step, cache, prompt, n, &cached_tokens));
      runs.push_back(mean(steps.back(), 0, steps.back().size()));
    }
    // each step's median over the repetitions: a burst of load on a shared machine in one
    // repetition does not move the per-position figures
    std::vector<double> per_step(steps[0].size());
    for (std::size_t i = 0; i < per_step.size(); ++i) {
      std::vector<double> at;
      for (const auto& r : steps) at.push_back(r[i]);
      per_step[i] = median(at);
    }
    const double cached = median(runs);
    if (cached_only) {
      std::printf("%10d %14.3f %16s %8s %9.2f MiB\n", n, cached * 1e3, "-", "-",
                  static_cast<double>(cache.bytes()) / (1 << 20));
      continue;
    }
    auto recompute = recompute_steps(run_full, prompt, quick ? std::min(n, 64) : n, &recomputed_tokens);
    const double recomputed = mean(recompute, 0, recompute.size());
    const bool same = std::equal(recomputed_tokens.begin(), recomputed_tokens.end(), cached_tokens.begin());
    std::printf("%10d %14.3f %16.3f %7.1fx %9.2f MiB%s\n", n, cached * 1e3, recomputed * 1e3, recomputed / cached,
                static_cast<double>(cache.bytes()) / (1 << 20), same ? "" : "  (tokens differ!)");
    if (n == 512) {
      cached_512 = per_step;
      recompute_512 = recompute;
    }
  }
  if (!quick && !cached_only) {
    std::printf("\nper-token cost by position while generating 512 tokens (ms; cached: each step's median of 5 runs):\n");
    std::printf("%12s %10s %12s\n", "positions", "cached", "recompute");
    for (std::size_t b = 0; b + 64 <= cached_512.size() + 1; b += 64) {
      const std::size_t e = std::min(b + 64, cached_512.size());
      std::printf("%5zu-%-6zu %10.3f %12.3f\n", b + 16, e + 16, mean(cached_512, b, e) * 1e3,
                  mean(recompute_512, b, std::min(e, recompute_512.size())) * 1e3);
    }
  }
  return 0;
}
