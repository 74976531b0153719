// Data-parallel training step of the small encoder–decoder (d_model 256, 8 heads, 3 + 3 layers,
// ffn 1024, vocabularies 1000; as bench_vs_torch's small_train): a global batch of B = 16
// sequences of length 64 per step, cut into micro-batches.
//
//   bench_distributed [--threads T] [--micro-batches M] [--steps N] [--warmup W] [--shard-optimizer]
//   mpirun -np 2 bench_distributed --threads 1 ...
//
// Alone, one process takes every micro-batch of the step (accumulating them); under mpirun the
// M micro-batches are shared between the ranks, and the timed steps alternate between reducing
// the gradients during backward (overlapped) and after it, so that both are measured under the
// same load. Prints one JSON line (rank 0): median step times, the medians of the reduction's
// exposed time (from the end of backward until the gradients were ready) and active time (first
// bucket ready to last reduced), and a checksum of the parameters — the same bits whatever the
// split. With --shard-optimizer each rank keeps and updates its share of Adam's state
// (data_parallel::shard_optimizer); the line then also gives the largest share of optimizer
// bytes a rank holds and the largest peak resident memory of a rank. scripts/bench_distributed
// runs the cases.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "loom/data/sharding.hpp"
#include "loom/distributed/data_parallel.hpp"
#include "loom/distributed/state.hpp"
#include "loom/loom.hpp"
#include "loom/nn/transformer.hpp"
#include "loom/train/trainer.hpp"

using namespace loom;

namespace {

constexpr nn::transformer_config small_cfg{.d_model = 256,
                                           .heads = 8,
                                           .ffn = 1024,
                                           .encoder_layers = 3,
                                           .decoder_layers = 3,
                                           .src_vocab = 1000,
                                           .tgt_vocab = 1000};
constexpr std::int64_t batch = 16, length = 64;

struct settings {
  int threads = 1;
  std::int64_t micro_batches = 2;
  int steps = 10, warmup = 3;
  bool shard_optimizer = false;
};

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (arg("--threads"))
      s.threads = std::stoi(argv[++i]);
    else if (arg("--micro-batches"))
      s.micro_batches = std::stol(argv[++i]);
    else if (arg("--steps"))
      s.steps = std::stoi(argv[++i]);
    else if (arg("--warmup"))
      s.warmup = std::stoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--shard-optimizer"))
      s.shard_optimizer = true;
    else {
      std::fprintf(stderr, "usage: %s [--threads T] [--micro-batches M] [--steps N] [--warmup W] [--shard-optimizer]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return s;
}

// Micro-batch j of a step: rows [j·b, (j+1)·b) of the step's batch of random sequences.
struct micro_batch {
  tensor<std::int32_t> src, src_len, tgt, target;
  std::vector<feed> feeds() const { return {{"src", src}, {"src_len", src_len}, {"tgt", tgt}, {"target", target}}; }
};

micro_batch make_micro_batch(std::int64_t step, std::int64_t j, std::int64_t rows) {
  rng gen(static_cast<std::uint64_t>(step) * 1000 + static_cast<std::uint64_t>(j));
  micro_batch m{tensor<std::int32_t>(dims_t{rows, length}), tensor<std::int32_t>(dims_t{rows}),
                tensor<std::int32_t>(dims_t{rows, length}), tensor<std::int32_t>(dims_t{rows, length})};
  for (auto& v : m.src.values()) v = 3 + static_cast<std::int32_t>(gen.below(small_cfg.src_vocab - 3));
  for (auto& v : m.target.values()) v = 3 + static_cast<std::int32_t>(gen.below(small_cfg.tgt_vocab - 3));
  for (std::int64_t i = 0; i < rows; ++i) {
    m.src_len[i] = static_cast<std::int32_t>(length);
    m.tgt[i * length] = 1;
    for (std::int64_t t = 1; t < length; ++t) m.tgt[i * length + t] = m.target[i * length + t - 1];
  }
  return m;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int bench(const settings& s, distributed::communicator* comm) {
  const int rank = comm ? comm->rank() : 0, ranks = comm ? comm->size() : 1;
  auto g = make_graph(nn::seq2seq<small_cfg, nn::train_mode>::loss<0>());
  auto params = g.make_params<float>(1);
  auto run = g.executor<float>(params, {.threads = s.threads});
  adam<float> opt(params, {.lr = 1e-4});
  trainer_options options;
  options.total_steps = s.warmup + s.steps;
  options.progress.print_every = 1'000'000;
  options.progress.out = std::fopen("/dev/null", "w");
  trainer<float> tr(run, params, opt, options);
  std::unique_ptr<distributed::data_parallel<float>> dp;
  if (comm) {
    dp = std::make_unique<distributed::data_parallel<float>>(
        *comm, run, params,
        distributed::data_parallel_options{.config = {{"micro_batches", std::to_string(s.micro_batches)}}});
    tr.set_gradient_sync(dp.get());
    if (s.shard_optimizer) dp->shard_optimizer(opt);
  }
  const auto mine = rank_micro_batches(s.micro_batches, rank, ranks);
  // [0]: overlapped, [1]: after backward (alone: every step in [0])
  std::vector<double> step_ms[2], exposed_ms[2], active_ms[2], cpu_ms[2];
  double loss = 0;
  for (int step = 1; step <= s.warmup + s.steps; ++step) {
    const int mode = dp ? (step - 1) % 2 : 0;  // step 1 overlapped: the buckets are laid out from it
    if (dp) dp->set_overlap(mode == 0);
    std::vector<micro_batch> data;
    for (std::int64_t j = mine.first; j < mine.first + mine.count; ++j)
      data.push_back(make_micro_batch(step, j, batch / s.micro_batches));
    std::vector<std::vector<feed>> feeds;
    for (const auto& m : data) feeds.push_back(m.feeds());
    const double t0 = now();
    loss = tr.step(feeds);
    const double t1 = now();
    if (step > s.warmup) {
      step_ms[mode].push_back(1e3 * (t1 - t0));
      if (dp) {
        exposed_ms[mode].push_back(1e3 * dp->last_times().exposed);
        active_ms[mode].push_back(1e3 * dp->last_times().active);
        cpu_ms[mode].push_back(1e3 * dp->last_times().cpu);
      }
    }
  }
  const std::uint64_t checksum = distributed::state_checksum(params);
  std::uint64_t optimizer_bytes = 0;  // Adam's buffers on this rank
  for (const auto& [kind, by_param] : opt.state().buffers)
    for (const auto& [name, t] : by_param) optimizer_bytes += static_cast<std::uint64_t>(t.size()) * sizeof(float);
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto max_over_ranks = [&](std::uint64_t v) {
    if (!comm) return v;
    const auto all = comm->all_gather(v);
    return *std::max_element(all.begin(), all.end());
  };
  const std::uint64_t max_optimizer_bytes = max_over_ranks(optimizer_bytes);
  const std::uint64_t max_rss_kib = max_over_ranks(static_cast<std::uint64_t>(usage.ru_maxrss));
  if (rank == 0)
    std::printf(
        "{\"ranks\": %d, \"threads\": %d, \"micro_batches\": %lld, \"step_ms\": %.2f, \"step_ms_after\": %.2f, "
        "\"exposed_ms\": %.2f, \"exposed_ms_after\": %.2f, \"active_ms\": %.2f, \"active_ms_after\": %.2f, "
        "\"comm_cpu_ms\": %.2f, \"comm_cpu_ms_after\": %.2f, "
        "\"buckets\": %zu, \"params\": %lld, \"loss\": %.6f, \"checksum\": \"%016llx\", \"sharded\": %s, "
        "\"max_optimizer_mib\": %.2f, \"max_rss_mib\": %.1f}\n",
        ranks, run.threads(), static_cast<long long>(s.micro_batches), median(step_ms[0]), median(step_ms[1]),
        median(exposed_ms[0]), median(exposed_ms[1]), median(active_ms[0]), median(active_ms[1]), median(cpu_ms[0]),
        median(cpu_ms[1]), dp ? dp->buckets() : 0, static_cast<long long>(params.numel()), loss,
        static_cast<unsigned long long>(checksum), s.shard_optimizer && dp ? "true" : "false",
        static_cast<double>(max_optimizer_bytes) / (1 << 20), static_cast<double>(max_rss_kib) / 1024);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const settings s = parse(argc, argv);
  if (!distributed::launched_by_mpi()) return bench(s, nullptr);
  return distributed::run(argc, argv, [&](distributed::communicator& world) { return bench(s, &world); });
}
