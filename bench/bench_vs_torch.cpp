// loom's half of the side-by-side benchmark with PyTorch (scripts/bench_vs_torch runs both
// and prints the table). Every case runs in float32 at a given thread count; the PyTorch half
// (scripts/bench_vs_torch.py --torch-case) runs the same shapes, data and timing protocol.
//
//   mha_fwd_*, mha_fwdbwd_*   nn::self_attention forward (inference executor), and forward +
//                             backward of sum(out), for four (B, T, d, h)
//   tiny_train, small_train   one training step of nn::seq2seq<C, train_mode>::loss<0>() with
//                             loom::adam: forward, cross-entropy, backward, Adam step; also the
//                             peak RSS and the loss over the timed steps (it must decrease)
//   gqa_fwd, gqa_fwdbwd       grouped-query attention alone, causal: q [4, 16, 512, 64], k and v
//                             [4, 4, 512, 64] (nn::attention<{.is_causal, .enable_gqa}>: each
//                             key/value head read in place by its 4 query heads, no copy);
//                             forward (inference) and forward + backward of sum(out) with the
//                             gradients of q, k and v; also the executor's arena and peak RSS
//   decode                    greedy generation of 128 tokens through the KV cache (nn::generate,
//                             nn::language_model<C, decode_mode>), ms per token after the prefill
//   decode_b8                 the same for 8 sequences at once (batch 8): time per step, which
//                             gives each of the 8 its next token
//   decode_b8_packed          decode_b8 with exec_options::pack_weights (each weight packed for
//                             the GEMM once, not at every step); loom only
//   decode_t512               decode with 512 new tokens (the cache grows to 528 positions)
//   decode_int8,              decode and decode_t512 with the weights quantized to int8
//   decode_int8_t512          (exec_options::weights = int8); loom only
//   sgemm                     the BLAS ceiling: 1024³ sgemm through loom's own BLAS entry
//                             (ops::gemm, one thread per call), N concurrent calls for N threads
//   fma_peak                  the machine's FP32 peak: N threads of independent vector FMAs on
//                             registers (AVX-512F or AVX2 + FMA, chosen at run time); loom only
//   read_bw_memory            read bandwidth from memory: N threads summing their shares of one
//                             512 MiB buffer (far beyond any cache); loom only
//   read_bw_decode            the same over a buffer of the decode case's parameter bytes (what
//                             one decoding step reads; it may stay in cache); loom only
//   decode_gemv               the decode case's weight GEMVs alone: x · Wᵀ for every weight matrix
//                             of its model but the embedding table (nine), one row each, through
//                             ops::gemm as decoding calls it; loom only
//   decode_gemv_int8          decode_gemv with those weights in int8 (the int8 products as the
//                             executor calls them); loom only
//   mha_fwd_b1_t1024_d512_h8_bf16,     the largest MHA shape, tiny_train and small_train in
//   mha_fwdbwd_b1_t1024_d512_h8_bf16,  bf16 (exec_options::precision = bf16: matmul, the linear
//   tiny_train_bf16, small_train_bf16  layers and fused attention's products in bf16, float
//                                      accumulation); PyTorch's side: CPU autocast to bfloat16
//
// Timing: warm-up (at least 3 calls and 0.3 s; --quick: 1 call and 0.05 s), then the median of
// 7 (--quick, a smoke run: 3) repetitions of k calls each, k chosen from the median warm-up call
// so that a repetition lasts about 0.2 s (--quick: 0.03 s). Wall time (std::chrono::steady_clock).
//
//   bench_vs_torch [--case NAME] [--threads N] [--json] [--quick] [--memory-plan] [--profile] [--list]
//                  [--tiling] [--keep-subnormals]
//
// --profile: after a training case, ten more steps (after three of warm-up) on an executor with
// exec_options::profile, and their kernel time by op on stderr (profile_report::table), then
// each linear layer's time and its products' GFLOP/s; after an MHA case, the same for ten calls.
//
// --keep-subnormals: loom's executors keep subnormal numbers (exec_options::subnormals =
// subnormal_mode::keep) instead of flushing them, float's default: to measure what flushing saves.
//
// --tiling: the float GEMM's ISA and tile on this CPU (and a fresh timing of the AVX-512 tiles),
// the kernel of the int8 weight products ("avx512_vnni", "avx2" or "portable") and the core
// OpenBLAS chose for its own (openblas_get_corename: "Prescott" is its SSE3 fallback); the script
// puts that line in its table's CPU field.
//
// Without --case, runs every case and prints a table; with --json, prints one JSON line per case.
#include <cblas.h>
#include <oneapi/tbb/global_control.h>
#include <immintrin.h>
#include <sys/resource.h>
// GCC 12's _mm512_reduce_add_ps passes an "undefined" vector to a shuffle, which
// -Wuninitialized reports once inlined (a false positive)
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <array>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../ops/blas.hpp"  // loom's BLAS entry point (private to the library; linked in loom::loom)
#include "../ops/gcc_vector.hpp"
#include "../ops/int8_gemm.hpp"  // the int8 weight products (exec_options::weights)
#include "../ops/sgemm_avx512.hpp"  // its tile shape (--tiling)
#include "../ops/vector_isa.hpp"
#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/kv_cache.hpp"
#include "loom/nn/transformer.hpp"
#include "loom/train/optim.hpp"

using namespace loom;
using clock_type = std::chrono::steady_clock;

namespace {

struct settings {
  int threads = 1;
  bool quick = false;
  bool memory_plan = false;  // print the training steps' memory plans (stderr)
  bool profile = false;      // print where the training steps' time goes, by op (stderr)
  subnormal_mode subnormals = subnormal_mode::automatic;  // --keep-subnormals: subnormal_mode::keep
  int warmup_calls() const { return quick ? 1 : 3; }
  double warmup_seconds() const { return quick ? 0.05 : 0.3; }
  int repetitions() const { return quick ? 3 : 7; }
  double repetition_seconds() const { return quick ? 0.03 : 0.2; }
};

/// One JSON object, built field by field (numbers, lists of numbers and plain strings).
struct json_line {
  std::string body;
  std::vector<std::pair<std::string, double>> numbers;  // for get()

  json_line& num(const std::string& key, double v) {
    numbers.emplace_back(key, v);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", std::isfinite(v) ? v : 0.0);
    return raw(key, buf);
  }
  json_line& str(const std::string& key, const std::string& v) { return raw(key, "\"" + v + "\""); }
  json_line& list(const std::string& key, const std::vector<double>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%.9g", i ? ", " : "", v[i]);
      s += buf;
    }
    return raw(key, s + "]");
  }
  json_line& raw(const std::string& key, const std::string& v) {
    body += (body.empty() ? "" : ", ") + ("\"" + key + "\": ") + v;
    return *this;
  }
  /// A number set with num(), NaN if absent.
  double get(const std::string& key) const {
    for (const auto& [k, v] : numbers)
      if (k == key) return v;
    return NAN;
  }
};

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// CPU seconds (user + system) of the whole process so far.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/// Peak resident set size of the process so far, in MiB.
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux: KiB
}

/// What time_calls() measured: seconds per call of each repetition, and so on.
struct timing {
  std::vector<double> reps;  // seconds per call, one per repetition
  int iters = 0;             // calls per repetition
  int warmup_calls = 0;
  double cpu_per_wall = 0;  // CPU time over wall time while timed (≈ the number of busy threads)

  json_line json() const {
    json_line j;
    j.num("median_s", median(reps)).num("min_s", *std::min_element(reps.begin(), reps.end()));
    j.num("iters", iters).num("warmup_calls", warmup_calls).list("reps_s", reps).num("cpu_per_wall", cpu_per_wall);
    return j;
  }
};

/// Warm-up, then s.repetitions() repetitions of `iters` calls of `call` (see the top).
timing time_calls(const settings& s, const std::function<void()>& call) {
  timing t;
  const auto w0 = clock_type::now();
  std::vector<double> warm;  // seconds of each warm-up call
  while (t.warmup_calls < s.warmup_calls() || seconds_between(w0, clock_type::now()) < s.warmup_seconds()) {
    const auto c0 = clock_type::now();
    call();
    warm.push_back(seconds_between(c0, clock_type::now()));
    ++t.warmup_calls;
  }
  if (warm.size() > 1) warm.erase(warm.begin());  // the first call allocates and faults pages in
  const double per_call = median(warm);
  t.iters = std::max(1, static_cast<int>(std::lround(s.repetition_seconds() / per_call)));
  const double cpu0 = cpu_seconds();
  const auto t_all = clock_type::now();
  for (int r = 0; r < s.repetitions(); ++r) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < t.iters; ++i) call();
    t.reps.push_back(seconds_between(t0, clock_type::now()) / t.iters);
  }
  t.cpu_per_wall = (cpu_seconds() - cpu0) / seconds_between(t_all, clock_type::now());
  return t;
}

tensor<float> random_tensor(dims_t dims, std::uint64_t seed) {
  rng gen(seed);
  tensor<float> t(dims);
  for (float& v : t.values()) v = static_cast<float>(gen.uniform(-1, 1));
  return t;
}

/// The token generator shared with the PyTorch side (scripts/bench_vs_torch.py, `lcg`): a
/// 64-bit LCG (Knuth's MMIX constants), ids 3 + (state >> 33) mod (vocab − 3), i.e. in [3, vocab).
struct lcg {
  std::uint64_t state;
  int next_id(long vocab) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return 3 + static_cast<int>((state >> 33) % static_cast<std::uint64_t>(vocab - 3));
  }
};

// ---------------------------------------------------------------- multi-head attention

/// GEMM FLOPs of multi-head self-attention forward (one multiply-add = 2 FLOPs): QKV
/// projection 2·B·T·d·3d, scores 2·B·T·T·d, weights·V 2·B·T·T·d, out projection 2·B·T·d·d.
/// Forward + backward counts 3× this (two GEMMs per forward GEMM in the backward).
double mha_flop(double B, double T, double d) {
  return 2 * B * T * d * 3 * d + 4 * B * T * T * d + 2 * B * T * d * d;
}

template <long D>
auto x_input() {
  return input<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>();
}

/// --profile: `calls` ten times (after three of warm-up: the arena, the worker threads) on
/// `timed`, an executor with exec_options::profile; its kernel time by op on stderr, and the report.
template <class Executor, class Call>
profile_report print_profile(Executor& timed, Call calls) {
  for (int i = 0; i < 3; ++i) calls();
  timed.reset_profile();
  for (int i = 0; i < 10; ++i) calls();
  profile_report report = timed.profile();
  std::fprintf(stderr, "%s", report.table(16).c_str());
  return report;
}

template <long D, int H>
json_line mha_forward(const settings& s, std::int64_t b, std::int64_t t,
                      compute_precision precision = compute_precision::f32) {
  auto g = make_graph(nn::self_attention<"attn", H>(x_input<D>()));  // [B, T, d]
  auto params = g.template make_params<float>(42);
  exec_options o{.threads = s.threads, .inference = true, .precision = precision, .subnormals = s.subnormals};
  auto run = g.template executor<float>(params, o);
  const auto x = random_tensor({b, t, D}, 7);
  auto j = time_calls(s, [&] { run.forward({{"x", x}}); }).json();
  if (s.profile) {
    o.profile = true;
    auto timed = g.template executor<float>(params, o);
    print_profile(timed, [&] { timed.forward({{"x", x}}); });
  }
  return j.num("flop", mha_flop(static_cast<double>(b), static_cast<double>(t), D));
}

template <long D, int H>
json_line mha_forward_backward(const settings& s, std::int64_t b, std::int64_t t,
                               compute_precision precision = compute_precision::f32) {
  auto g = make_graph(sum(nn::self_attention<"attn", H>(x_input<D>())));  // backward of sum(out)
  auto params = g.template make_params<float>(42);
  exec_options o{.threads = s.threads, .precision = precision, .subnormals = s.subnormals};
  auto run = g.template executor<float>(params, o);
  const auto x = random_tensor({b, t, D}, 7);
  const auto timed = time_calls(s, [&] {
    run.forward({{"x", x}});
    run.backward();
  });
  auto j = timed.json();
  if (s.profile) {
    o.profile = true;
    auto profiled = g.template executor<float>(params, o);
    print_profile(profiled, [&] {
      profiled.forward({{"x", x}});
      profiled.backward();
    });
  }
  return j.num("flop", 3 * mha_flop(static_cast<double>(b), static_cast<double>(t), D));
}

// ---------------------------------------------------------------- grouped-query attention

constexpr long gqa_q_heads = 16, gqa_kv_heads = 4, gqa_d = 64;

/// GEMM FLOPs of attention alone: scores 2·B·Hq·T·S·d, weights·V 2·B·Hq·T·S·d, halved by the
/// causal mask (the fused kernel skips the hidden key blocks; PyTorch's explicit math does not).
double gqa_flop(double B, double T) { return 0.5 * 4 * B * gqa_q_heads * T * T * gqa_d; }

json_line gqa(const settings& s, bool backward, std::int64_t b, std::int64_t t) {
  auto q = input<"q", shape<dyn<"B">, fix<gqa_q_heads>, dyn<"T">, fix<gqa_d>>>();
  auto k = input<"k", shape<dyn<"B">, fix<gqa_kv_heads>, dyn<"T">, fix<gqa_d>>>();
  auto v = input<"v", shape<dyn<"B">, fix<gqa_kv_heads>, dyn<"T">, fix<gqa_d>>>();
  const auto qs = random_tensor({b, gqa_q_heads, t, gqa_d}, 1), ks = random_tensor({b, gqa_kv_heads, t, gqa_d}, 2),
             vs = random_tensor({b, gqa_kv_heads, t, gqa_d}, 3);
  const double rss_before = peak_rss_mib();
  auto g = make_graph(sum(nn::attention<{.is_causal = true, .enable_gqa = true}>(q, k, v)));
  param_store<float> none;
  auto run = g.executor<float>(
      none, {.threads = s.threads, .input_grads = backward, .inference = !backward, .subnormals = s.subnormals});
  const auto timed = time_calls(s, [&] {
    run.forward({{"q", qs}, {"k", ks}, {"v", vs}});
    if (backward) run.backward();
  });
  auto j = timed.json();
  // what one copy of the keys and values repeated to Hq heads would take (loom makes none: the
  // plan's nodes below list what it holds)
  const double expanded_mib = 2.0 * static_cast<double>(b * gqa_q_heads * t * gqa_d) * 4 / (1 << 20);
  int attention_nodes = 0;
  for (const node_desc* d : run.plan().order) attention_nodes += d->op->name == "attention";
  j.num("flop", (backward ? 3 : 1) * gqa_flop(static_cast<double>(b), static_cast<double>(t)));
  j.num("arena_mib", static_cast<double>(run.arena_bytes()) / (1 << 20));
  j.num("kv_mib", 2.0 * static_cast<double>(ks.size()) * 4 / (1 << 20)).num("kv_expanded_mib", expanded_mib);
  j.num("fused_attention_nodes", attention_nodes).num("plan_nodes", run.plan().size());
  j.num("rss_baseline_mib", rss_before).num("rss_peak_mib", peak_rss_mib());
  return j;
}

// ---------------------------------------------------------------- training step

constexpr nn::transformer_config tiny_cfg{
    .d_model = 64, .heads = 4, .ffn = 256, .encoder_layers = 2, .decoder_layers = 2, .src_vocab = 32, .tgt_vocab = 32};
constexpr nn::transformer_config small_cfg{.d_model = 256,
                                           .heads = 8,
                                           .ffn = 1024,
                                           .encoder_layers = 3,
                                           .decoder_layers = 3,
                                           .src_vocab = 1000,
                                           .tgt_vocab = 1000};
// the same model, each layer recomputed in backward instead of kept (checkpoint)
constexpr nn::transformer_config small_recompute_cfg = [] {
  auto c = small_cfg;
  c.recompute = true;
  return c;
}();

/// GEMM FLOPs of one encoder–decoder forward (biases, norms, softmax, embeddings left out):
///   encoder layer:  2·B·S·d·(3d + d + 2f) + 4·B·S²·d           (QKV, out, FFN; scores, weights·V)
///   decoder layer:  2·B·T·d·(3d + d + 2f) + 4·B·T²·d            (self-attention, FFN)
///                 + 2·B·T·d·2d + 2·B·S·d·2d + 4·B·T·S·d         (cross: Q and out, K and V; scores, weights·V)
///   generator:      2·B·T·d·V
/// A training step counts 3× this (the backward does two GEMMs per forward GEMM); Adam is not counted.
double seq2seq_flop(const nn::transformer_config& c, double B, double S, double T) {
  const double d = static_cast<double>(c.d_model), f = static_cast<double>(c.ffn);
  const double enc = 2 * B * S * d * (4 * d + 2 * f) + 4 * B * S * S * d;
  const double dec = 2 * B * T * d * (4 * d + 2 * f) + 4 * B * T * T * d + 2 * B * T * d * 2 * d +
                     2 * B * S * d * 2 * d + 4 * B * T * S * d;
  return static_cast<double>(c.encoder_layers) * enc + static_cast<double>(c.decoder_layers) * dec +
         2 * B * T * d * static_cast<double>(c.tgt_vocab);
}

template <nn::transformer_config C>
json_line train_step(const settings& s, std::int64_t b, std::int64_t len,
                     compute_precision precision = compute_precision::f32) {
  // the batch: src [B, S] and y [B, T] from the shared LCG; tgt = BOS (1), y[:-1]; target = y
  lcg gen{1234};
  tensor<std::int32_t> src(dims_t{b, len}), tgt(dims_t{b, len}), target(dims_t{b, len}), src_len(dims_t{b});
  for (auto& v : src.values()) v = gen.next_id(C.src_vocab);
  for (auto& v : target.values()) v = gen.next_id(C.tgt_vocab);
  for (std::int64_t i = 0; i < b; ++i) {
    src_len[i] = static_cast<std::int32_t>(len);  // every source position valid
    tgt[i * len] = 1;
    for (std::int64_t t = 1; t < len; ++t) tgt[i * len + t] = target[i * len + t - 1];
  }

  const double rss_before = peak_rss_mib();  // the process baseline, just before building the model
  auto g = make_graph(nn::seq2seq<C, nn::train_mode>::template loss<0>());
  auto params = g.template make_params<float>(1);
  exec_options o{.threads = s.threads, .precision = precision, .subnormals = s.subnormals};
  auto run = g.template executor<float>(params, o);
  // the memory plan, known before running: B is the batch, every other dim the length
  std::vector<std::pair<std::string_view, std::int64_t>> dims;
  for (std::string_view sym : run.plan().syms) dims.emplace_back(sym, sym == "B" ? b : len);
  const memory_report planned = run.memory_plan(dims);
  if (s.memory_plan) std::fprintf(stderr, "%s", planned.str(-1).c_str());
  adam<float> opt(params, {.lr = 1e-3});
  std::vector<double> losses;
  const auto t = time_calls(s, [&] {
    run.forward({{"src", src}, {"src_len", src_len}, {"tgt", tgt}, {"target", target}});
    losses.push_back(run.output()[0]);
    run.backward();
    opt.step();
  });
  auto j = t.json();
  const double flop = 3 * seq2seq_flop(C, static_cast<double>(b), static_cast<double>(len), static_cast<double>(len));
  j.num("flop", flop).num("loss_first", losses.front());
  j.num("loss_timed_first", losses.at(static_cast<std::size_t>(t.warmup_calls)));
  j.num("loss_last", losses.back()).num("steps", static_cast<double>(losses.size()));
  j.num("rss_baseline_mib", rss_before).num("rss_peak_mib", peak_rss_mib());
  j.num("params", static_cast<double>(params.numel()));
  j.num("arena_mib", static_cast<double>(run.arena_bytes()) / (1 << 20));  // the executor's value and gradient buffers
  j.num("planned_mib", static_cast<double>(planned.peak_bytes) / (1 << 20));  // what the plan said before running
  if (s.profile) {  // the same steps on an executor that times its kernels (exec_options::profile)
    o.profile = true;
    auto timed = g.template executor<float>(params, o);
    const profile_report report = print_profile(timed, [&] {
      timed.forward({{"src", src}, {"src_len", src_len}, {"tgt", tgt}, {"target", target}});
      timed.backward();
      opt.step();
    });
    // then each linear layer (x [.., K] · Wᵀ, W [N, K]): its products' GFLOP/s, 2·rows·N·K in
    // forward and twice that in backward (dX and dW; the head with its loss does all three in
    // forward)
    const plan_view& plan = timed.plan();
    std::fprintf(stderr, "%-32s %-18s %6s %6s %10s %10s %8s %8s\n", "linear node", "x", "K", "N", "fwd ms", "bwd ms",
                 "fwd GF/s", "bwd GF/s");
    for (const node_time& t : report.nodes) {
      if (!t.op.starts_with("linear")) continue;
      const auto in = plan.inputs(t.node);
      const dims_t xd = timed.dims(in[0]);
      const double k = static_cast<double>(xd[-1]), rows = static_cast<double>(xd.prod(0, xd.rank - 1));
      const double n = static_cast<double>(timed.dims(in[1])[0]);
      const double fwd = t.forward_s / static_cast<double>(report.forwards);
      const double bwd = report.backwards ? t.backward_s / static_cast<double>(report.backwards) : 0.0;
      const bool head = t.op == "linear_cross_entropy";  // its backward only scales: no GFLOP/s
      const double macs = rows * n * k, fwd_flop = (head ? 6 : 2) * macs;
      char bwd_rate[16] = "       -";
      if (!head && bwd > 0) std::snprintf(bwd_rate, sizeof bwd_rate, "%8.1f", 4 * macs / bwd * 1e-9);
      std::fprintf(stderr, "%-32s %-18s %6.0f %6.0f %10.4f %10.4f %8.1f %s\n", t.what.c_str(),
                   plan.shape_text(in[0]).c_str(), k, n, 1e3 * fwd, 1e3 * bwd, fwd > 0 ? fwd_flop / fwd * 1e-9 : 0.0,
                   bwd_rate);
    }
  }
  return j;
}

// ---------------------------------------------------------------- decoding

constexpr nn::transformer_config lm_cfg{
    .d_model = 256, .heads = 8, .ffn = 1024, .decoder_layers = 2, .tgt_vocab = 1000};

/// The decode case's parameters (make_params of its model, seed 1).
param_store<float> decode_params() {
  return make_graph(nn::language_model<lm_cfg, nn::eval_mode>::logits()).make_params<float>(1);
}

json_line decode_batch(const settings& s, int batch, int new_tokens = 128, bool int8 = false, bool packed = false) {
  constexpr int prompt_len = 16;
  using step_model = nn::language_model<lm_cfg, nn::decode_mode>;
  auto step = make_graph(step_model::logits());
  auto params = decode_params();
  auto run = step.executor<float>(
      params, {.threads = s.threads,
               .inference = true,
               .weights = int8 ? weight_precision::int8 : weight_precision::f32,
               .pack_weights = packed, .subnormals = s.subnormals});
  lcg gen{99};
  std::vector<std::vector<int>> prompts(static_cast<std::size_t>(batch));
  for (auto& prompt : prompts)  // sequence 0's prompt is the single-sequence case's
    for (int i = 0; i < prompt_len; ++i) prompt.push_back(gen.next_id(lm_cfg.tgt_vocab));
  nn::kv_cache<float> cache(step, batch, prompt_len + new_tokens);
  const nn::generate_options o{.max_new_tokens = new_tokens};

  const auto w0 = clock_type::now();  // warm-up, as time_calls()
  for (int w = 0; w < s.warmup_calls() || seconds_between(w0, clock_type::now()) < s.warmup_seconds(); ++w)
    nn::generate(run, cache, prompts, o);
  std::vector<double> per_token, prefill, total;
  nn::generate_result last;
  const double cpu0 = cpu_seconds();
  const auto t0 = clock_type::now();
  for (int r = 0; r < s.repetitions(); ++r) {
    last = nn::generate(run, cache, prompts, o);
    per_token.push_back(last.decode_seconds / static_cast<double>(last.steps));
    prefill.push_back(last.prefill_seconds);
    total.push_back(last.prefill_seconds + last.decode_seconds);
  }
  const double cpu_per_wall = (cpu_seconds() - cpu0) / seconds_between(t0, clock_type::now());
  const auto& toks = last.tokens.at(0);
  bool valid = static_cast<int>(last.tokens.size()) == batch;
  for (const auto& seq : last.tokens)
    valid = valid && static_cast<int>(seq.size()) == new_tokens &&
            std::all_of(seq.begin(), seq.end(), [](int t) { return t >= 0 && t < lm_cfg.tgt_vocab; });
  json_line j;
  j.num("median_s", median(per_token)).num("min_s", *std::min_element(per_token.begin(), per_token.end()));
  j.list("reps_s", per_token).num("prefill_s", median(prefill)).num("total_s", median(total));
  j.num("cpu_per_wall", cpu_per_wall);
  j.num("tokens", static_cast<double>(toks.size())).num("steps", static_cast<double>(last.steps));
  j.num("tokens_valid", valid ? 1 : 0).num("first_tokens_0", toks.empty() ? -1 : toks[0]);
  // every parameter's bytes (a step reads each weight matrix once, one row of the embedding)
  j.num("weight_bytes", static_cast<double>(params.numel()) * sizeof(float));
  j.num("new_tokens", new_tokens).num("int8", int8 ? 1 : 0).num("pack_weights", packed ? 1 : 0);
  return j.num("batch", batch);
}

json_line decode(const settings& s) { return decode_batch(s, 1); }

// ---------------------------------------------------------------- BLAS ceiling, FMA peak

/// time_calls of `one(i)` for i = 0..k-1 run at once, call 0 on this thread and the others on
/// k − 1 threads started once: a "call" ends when all k are done.
timing time_concurrent(const settings& s, int k, const std::function<void(int)>& one) {
  std::barrier start(k), done(k);
  bool stop = false;
  std::vector<std::thread> workers;
  for (int i = 1; i < k; ++i)
    workers.emplace_back([&, i] {
      for (;;) {
        start.arrive_and_wait();
        if (stop) return;
        one(i);
        done.arrive_and_wait();
      }
    });
  auto timed = time_calls(s, [&] {
    start.arrive_and_wait();
    one(0);
    done.arrive_and_wait();
  });
  stop = true;
  start.arrive_and_wait();
  for (auto& w : workers) w.join();
  return timed;
}

/// `threads` concurrent 1024³ sgemm calls through ops::gemm, each on its own matrices.
json_line sgemm_ceiling(const settings& s) {
  constexpr std::int64_t n = 1024;
  const int k = s.threads;
  std::vector<tensor<float>> a, b, c;
  for (int i = 0; i < k; ++i) {
    a.push_back(random_tensor({n, n}, 10 + static_cast<std::uint64_t>(i)));
    b.push_back(random_tensor({n, n}, 20 + static_cast<std::uint64_t>(i)));
    c.emplace_back(dims_t{n, n});
  }
  auto j = time_concurrent(s, k, [&](int i) {
    ops::gemm<float>(false, false, n, n, n, 1.0f, a[i].data(), n, b[i].data(), n, 0.0f, c[i].data(), n);
  }).json();
  return j.num("flop", static_cast<double>(k) * 2.0 * n * n * n);
}

// The FMA peak: 16 independent chains of vector multiply-adds, `steps` FMAs each, on registers
// only (no memory, no dependence between chains longer than one FMA's latency: two FMA units of
// 4 cycles' latency need 8 chains in flight). The widest vectors the CPU has, chosen at run
// time: 16 floats (AVX-512F) or 8 (AVX2 + FMA); the multiplier and addend keep every value
// finite and normal. Returns a sum of the chains, so that none of them is dropped. Two copies,
// one per instruction set: a shared template cannot call either set's intrinsics (GCC inlines
// them only into a function compiled for that set), and generic vectors would not become FMAs
// under -std=c++20 (no contraction).
constexpr int fma_chains = 16;
constexpr std::int64_t fma_steps = 1 << 18;

[[gnu::target("avx512f")]] float fma_chains_512(float seed) {
  __m512 acc[fma_chains];
  for (int c = 0; c < fma_chains; ++c) acc[c] = _mm512_set1_ps(seed + static_cast<float>(c));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-6f);
  for (std::int64_t i = 0; i < fma_steps; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < fma_chains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
  __m512 t = acc[0];
  for (int c = 1; c < fma_chains; ++c) t = _mm512_add_ps(t, acc[c]);
  return _mm512_reduce_add_ps(t);
}

// AVX2 has 16 vector registers: 16 chains and their two constants did not fit, and the chains
// spilled to the stack, which halved the figure (54 instead of 95 GFLOP/s, AMD EPYC family 25
// model 1, Zen 3). 12 chains fit and still hide the FMA latency (10, 12 and 14 chains ran alike).
constexpr int fma_chains_avx2 = 12;

[[gnu::target("avx2,fma")]] float fma_chains_256(float seed) {
  __m256 acc[fma_chains_avx2];
  for (int c = 0; c < fma_chains_avx2; ++c) acc[c] = _mm256_set1_ps(seed + static_cast<float>(c));
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-6f);
  for (std::int64_t i = 0; i < fma_steps; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < fma_chains_avx2; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, a);
  __m256 t = acc[0];
  for (int c = 1; c < fma_chains_avx2; ++c) t = _mm256_add_ps(t, acc[c]);
  alignas(32) float lane[8];
  _mm256_store_ps(lane, t);
  float sum = 0;
  for (float x : lane) sum += x;
  return sum;
}

/// `threads` threads at once, each running fma_chains_512 (or _256) on its own registers: the
/// FLOP/s no GEMM on this machine can exceed. The other cases' GFLOP/s are read against it.
json_line fma_peak(const settings& s) {
  __builtin_cpu_init();
  const bool wide = __builtin_cpu_supports("avx512f") != 0;
  if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
    throw std::runtime_error("fma_peak: this CPU has neither AVX-512F nor AVX2 + FMA");
  const int k = s.threads, lanes = wide ? 16 : 8;
  std::vector<float> sink(static_cast<std::size_t>(k));
  auto j = time_concurrent(s, k, [&](int i) {
    const float seed = 1.0f + static_cast<float>(i);
    sink[static_cast<std::size_t>(i)] = wide ? fma_chains_512(seed) : fma_chains_256(seed);
  }).json();
  for (float x : sink)
    if (!std::isfinite(x)) throw std::runtime_error("fma_peak: the chains did not stay finite");
  j.num("vector_floats", lanes);
  const int chains = wide ? fma_chains : fma_chains_avx2;
  return j.num("flop", static_cast<double>(k) * 2.0 * chains * lanes * static_cast<double>(fma_steps));
}

// The read bandwidth: `threads` threads, each summing its consecutive share of one buffer of
// `bytes` (64-byte aligned, filled once) with four independent 64-byte vector sums, so that the
// loads, not the additions, limit it; compiled for the CPU's widest vectors (vector_isa.hpp), as
// the decoding kernels are. Integer sums: exact in any order.
using read_vector = ops::gcc_vector<std::uint64_t, 64>;

LOOM_VECTOR_CLONES std::uint64_t sum_share(const read_vector* p, std::int64_t n) {
  read_vector a{}, b{}, c{}, d{};
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; ++i) a += p[i];
  const read_vector t = a + b + c + d;
  std::uint64_t sum = 0;
  for (int l = 0; l < 8; ++l) sum += t[l];
  return sum;
}

json_line read_bandwidth(const settings& s, std::int64_t bytes) {
  const int k = s.threads;
  const std::int64_t n = bytes / 64;  // vectors
  std::vector<read_vector, aligned_allocator<read_vector>> buffer(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) buffer[static_cast<std::size_t>(i)] = read_vector{} + static_cast<std::uint64_t>(i);
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(k));
  auto j = time_concurrent(s, k, [&](int t) {
    const std::int64_t lo = n * t / k, hi = n * (t + 1) / k;
    sums[static_cast<std::size_t>(t)] = sum_share(buffer.data() + lo, hi - lo);
  }).json();
  std::uint64_t total = 0, want = 0;
  for (std::uint64_t x : sums) total += x;
  for (std::int64_t i = 0; i < n; ++i) want += 8 * static_cast<std::uint64_t>(i);
  if (total != want) throw std::runtime_error("read_bandwidth: the sums are wrong");
  return j.num("bytes", static_cast<double>(n * 64));
}

/// The weight GEMVs of one decoding step of the decode case: x · Wᵀ for every weight matrix of
/// its model (all its rank-2 parameters but the embedding table, which a step reads one row
/// of), one row each, through ops::gemm as the fused linear calls it for one row: what the step
/// spends reading its weights, against read_bw_decode. With int8, the same matrices quantized,
/// through ops::int8_gemm as an int8 executor's products call it.
json_line decode_gemv(const settings& s, bool int8 = false) {
  const auto params = decode_params();
  struct product {
    const tensor<float>* w;  // [out, in]
    ops::int8_matrix q;      // w quantized (int8: the products of exec_options::weights = int8)
    tensor<float> x, y;      // [1, in], [1, out]
  };
  std::vector<product> products;
  double bytes = 0;  // what the products read: float weights, or int8 ones (padded) and their scales
  std::uint64_t seed = 60;
  for (const auto& [name, e] : params) {
    if (e.value.rank() != 2 || name == "embed.weight") continue;
    auto& p = products.emplace_back(&e.value, ops::int8_matrix{}, random_tensor({1, e.value.dim(1)}, seed++),
                                    tensor<float>(dims_t{1, e.value.dim(0)}));
    if (int8) p.q = ops::quantize_rows(e.value.data(), e.value.dim(0), e.value.dim(1), name.c_str());
    bytes += int8 ? static_cast<double>(p.q.q.size() + sizeof(float) * p.q.scale.size())
                  : static_cast<double>(e.value.size()) * sizeof(float);
  }
  auto j = time_calls(s, [&] {
    for (auto& p : products) {
      const std::int64_t out = p.w->dim(0), in = p.w->dim(1);
      if (int8) ops::int8_gemm(1, p.x.data(), in, p.q.view(), p.y.data(), out);
      else ops::gemm<float>(false, true, 1, out, in, 1.0f, p.x.data(), in, p.w->data(), in, 0.0f, p.y.data(), out);
    }
  }).json();
  return j.num("bytes", bytes).num("gemvs", static_cast<double>(products.size()));
}

/// The decode case's parameter bytes (one decoding step reads each weight matrix once).
std::int64_t decode_weight_bytes() { return decode_params().numel() * static_cast<std::int64_t>(sizeof(float)); }

// ---------------------------------------------------------------- the cases

struct bench_case {
  std::string name;
  std::function<json_line(const settings&)> run;
};

std::vector<bench_case> cases() {
  std::vector<bench_case> r;
  auto mha = [&r]<long D, int H>(std::int64_t b, std::int64_t t) {
    const std::string shape =
        "b" + std::to_string(b) + "_t" + std::to_string(t) + "_d" + std::to_string(D) + "_h" + std::to_string(H);
    r.push_back({"mha_fwd_" + shape, [=](const settings& s) { return mha_forward<D, H>(s, b, t); }});
    r.push_back({"mha_fwdbwd_" + shape, [=](const settings& s) { return mha_forward_backward<D, H>(s, b, t); }});
  };
  mha.template operator()<64, 4>(8, 32);
  mha.template operator()<128, 4>(8, 128);
  mha.template operator()<256, 8>(4, 512);
  mha.template operator()<512, 8>(1, 1024);
  r.push_back({"tiny_train", [](const settings& s) { return train_step<tiny_cfg>(s, 32, 16); }});
  r.push_back({"small_train", [](const settings& s) { return train_step<small_cfg>(s, 16, 64); }});
  r.push_back({"small_train_recompute", [](const settings& s) { return train_step<small_recompute_cfg>(s, 16, 64); }});
  r.push_back({"gqa_fwd", [](const settings& s) { return gqa(s, false, 4, 512); }});
  r.push_back({"gqa_fwdbwd", [](const settings& s) { return gqa(s, true, 4, 512); }});
  r.push_back({"decode", decode});
  r.push_back({"decode_b8", [](const settings& s) { return decode_batch(s, 8); }});
  r.push_back({"decode_b8_packed", [](const settings& s) { return decode_batch(s, 8, 128, false, true); }});
  r.push_back({"decode_t512", [](const settings& s) { return decode_batch(s, 1, 512); }});
  // the same with the weights in int8 (exec_options::weights = int8): loom only
  r.push_back({"decode_int8", [](const settings& s) { return decode_batch(s, 1, 128, true); }});
  r.push_back({"decode_int8_t512", [](const settings& s) { return decode_batch(s, 1, 512, true); }});
  r.push_back({"sgemm", sgemm_ceiling});
  r.push_back({"fma_peak", fma_peak});
  r.push_back({"read_bw_memory", [](const settings& s) { return read_bandwidth(s, std::int64_t{512} << 20); }});
  r.push_back({"read_bw_decode", [](const settings& s) { return read_bandwidth(s, decode_weight_bytes()); }});
  r.push_back({"decode_gemv", [](const settings& s) { return decode_gemv(s); }});
  r.push_back({"decode_gemv_int8", [](const settings& s) { return decode_gemv(s, true); }});
  // in bf16 (exec_options::precision): the largest MHA shape and the training steps
  r.push_back({"mha_fwd_b1_t1024_d512_h8_bf16",
               [](const settings& s) { return mha_forward<512, 8>(s, 1, 1024, compute_precision::bf16); }});
  r.push_back({"mha_fwdbwd_b1_t1024_d512_h8_bf16",
               [](const settings& s) { return mha_forward_backward<512, 8>(s, 1, 1024, compute_precision::bf16); }});
  r.push_back({"tiny_train_bf16", [](const settings& s) { return train_step<tiny_cfg>(s, 32, 16, compute_precision::bf16); }});
  r.push_back({"small_train_bf16",
               [](const settings& s) { return train_step<small_cfg>(s, 16, 64, compute_precision::bf16); }});
  return r;
}

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--case NAME] [--threads N] [--json] [--quick] [--memory-plan] [--profile] [--list] [--tiling]\n"
               "       [--keep-subnormals]\n", argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  std::string only;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--case") && i + 1 < argc)
      only = argv[++i];
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      s.threads = std::stoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json"))
      json = true;
    else if (!std::strcmp(argv[i], "--quick"))
      s.quick = true;
    else if (!std::strcmp(argv[i], "--memory-plan"))
      s.memory_plan = true;
    else if (!std::strcmp(argv[i], "--profile"))
      s.profile = true;
    else if (!std::strcmp(argv[i], "--keep-subnormals"))
      s.subnormals = subnormal_mode::keep;
    else if (!std::strcmp(argv[i], "--tiling")) {  // loom's float GEMM tile on this CPU (sgemm_avx512.hpp)
      const auto t = ops::sgemm_avx512_tiling();
      std::printf("%s, tiles of %d rows x 32 columns, %d on copied panels (%s, CPU %s; "
                  "AVX-512 timed now: %d, %d rows); "
                  "int8 weight products: %s; OpenBLAS's core (the products loom's kernels do not take): %s\n",
                  t.isa, t.rows, t.packed_rows, t.how, t.cpu, ops::sgemm_avx512_measure_tile_rows(false),
                  ops::sgemm_avx512_measure_tile_rows(true), ops::int8_gemm_kernel(), openblas_get_corename());
      return 0;
    } else if (!std::strcmp(argv[i], "--list")) {
      for (const auto& c : cases()) std::printf("%s\n", c.name.c_str());
      return 0;
    } else
      return usage(argv[0]);
  }
  if (s.threads < 1) return usage(argv[0]);
  // Nothing in the process may run on more threads than asked (the executors' arenas are
  // limited too; this also covers any TBB loop outside them).
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(s.threads));

  const auto all = cases();
  if (!only.empty() && std::none_of(all.begin(), all.end(), [&](const bench_case& c) { return c.name == only; })) {
    std::fprintf(stderr, "bench_vs_torch: no case named '%s' (--list shows them)\n", only.c_str());
    return 2;
  }
  if (!json)
    std::printf("%-28s %7s %12s %12s %10s %8s\n", "case", "threads", "median ms", "fastest ms", "GFLOP/s", "cpu/wall");
  for (const auto& c : all) {
    if (!only.empty() && c.name != only) continue;
    json_line j;
    try {
      j = c.run(s);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_vs_torch: %s: %s\n", c.name.c_str(), e.what());
      return 1;
    }
    if (json) {
      json_line head;
      head.str("framework", "loom").str("case", c.name).num("threads", s.threads).num("quick", s.quick ? 1 : 0);
      std::printf("{%s, %s}\n", head.body.c_str(), j.body.c_str());
    } else {
      const double med = j.get("median_s");
      std::printf("%-28s %7d %12.3f %12.3f %10.1f %8.2f\n", c.name.c_str(), s.threads, med * 1e3, j.get("min_s") * 1e3,
                  j.get("flop") / med * 1e-9, j.get("cpu_per_wall"));
    }
    std::fflush(stdout);
  }
  return 0;
}
