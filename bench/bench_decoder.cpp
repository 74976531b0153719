// examples/llama's model side by side with the PyTorch reference of scripts/decoder_reference.py
// (scripts/bench_decoder.py runs both and prints the ratios). Prints one JSON line per case:
//
//   llama_train_step   forward + backward + Adam on B = 16 windows of T = 64 tokens (V = 32)
//   llama_decode       per token: a prefill of 8 tokens, then 56 one-token steps through the KV
//                      cache, batch 1 (the time of the steps / 56)
//
//   bench_decoder [--threads N] [--reps R]     median of R timed runs after 3 warm-up runs
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "llama_config.hpp"
#include "loom/loom.hpp"
#include "loom/nn/decoder.hpp"
#include "loom/nn/kv_cache.hpp"

using namespace loom;

namespace {

constexpr nn::decoder_config cfg = examples::llama_config;
constexpr std::int64_t vocab_size = 32, batch = 16, window = examples::llama_window, prefill = 8;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

tensor<std::int32_t> ids(std::int64_t b, std::int64_t t, std::uint64_t seed) {
  rng g(seed);
  tensor<std::int32_t> x(dims_t{b, t});
  for (std::int64_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::int32_t>(g.below(vocab_size));
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::stoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--reps") == 0) reps = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_decoder [--threads N] [--reps R]\n");
      return 2;
    }
  }
  using train = nn::decoder_lm<cfg, nn::train_mode>;
  using decode = nn::decoder_lm<cfg, nn::decode_mode>;
  auto g = make_graph(train::loss());
  auto params = g.make_params<float>(1, {{"V", vocab_size}});
  auto run = g.executor<float>(params, {.threads = threads});
  adam<float> opt(params, {.lr = 1e-3});
  const auto tokens = ids(batch, window, 2), target = ids(batch, window, 3);
  std::vector<double> t;
  for (int r = 0; r < reps + 3; ++r) {
    const double t0 = now();
    run.forward({{"tokens", tokens}, {"target", target}});
    run.backward();
    opt.step();
    if (r >= 3) t.push_back(now() - t0);
  }
  std::printf("{\"case\": \"llama_train_step\", \"threads\": %d, \"ms\": %.4f}\n", threads, 1e3 * median(t));

  auto step = make_graph(decode::logits()).executor<float>(params, {.threads = threads, .inference = true});
  auto cache = nn::kv_cache<float>::of<decode>(1, window);
  const auto prompt = ids(1, window, 4);
  t.clear();
  for (int r = 0; r < reps + 3; ++r) {
    cache.reset();
    double t0 = 0;
    for (std::int64_t p = 0; p < window;) {
      const std::int64_t n = p == 0 ? prefill : 1;
      if (p == prefill) t0 = now();
      tensor<std::int32_t> tok(dims_t{1, n}), pos(dims_t{1, n}), first(dims_t{1});
      first[0] = 0;
      for (std::int64_t k = 0; k < n; ++k) tok[k] = prompt[p + k], pos[k] = static_cast<std::int32_t>(p + k);
      nn::decode_step(step, cache, {{"tokens", tok}, {"positions", pos}, {"first", first}});
      p += n;
    }
    if (r >= 3) t.push_back((now() - t0) / static_cast<double>(window - prefill));
  }
  std::printf("{\"case\": \"llama_decode\", \"threads\": %d, \"ms\": %.4f}\n", threads, 1e3 * median(t));
  return 0;
}
