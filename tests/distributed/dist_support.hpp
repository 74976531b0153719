// What the distributed tests and dist_train share: a tiny translation model with dropout, the
// micro-batches a rank trains on at each step, and a training loop that runs on one process or
// through loom::distributed::data_parallel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/data/sharding.hpp"
#include "loom/distributed/data_parallel.hpp"
#include "loom/train/trainer.hpp"
#include "translation.hpp"

namespace dist_test {

using namespace loom;
using namespace translation;

constexpr auto cfg = [] {
  auto c = config<0.1>;  // with dropout: its random streams must not depend on the rank
  c.d_model = 16;
  c.heads = 2;
  c.ffn = 32;
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  return c;
}();
using model = nn::seq2seq<cfg, nn::train_mode>;
inline auto loss_graph() {
  return make_graph(model::loss<pad, 0.1>());
}

/// How a run is set up; the same on every rank.
struct setup {
  std::int64_t micro_batches = 2;   // per step, over all ranks
  std::size_t batch = 8;            // examples per step, over all ranks
  std::uint64_t seed = 3;           // data and dropout
  long total_steps = 8;             // for the learning-rate schedule
  std::size_t bucket_bytes = 2048;  // small: several buckets even for this model
  bool overlap = true;
  bool shard_optimizer = false;     // ZeRO stage 1: each rank keeps and updates its share
};

inline const task& data() {
  static const task t(9'999, 200, 10, 10, 5);
  return t;
}

/// One rank's micro-batches of one step: the step's batch (task::train_indices) cut into
/// s.micro_batches, this rank's consecutive share; micro-batch j's dropout seed is
/// (seed, (step - 1)·K + j), j counted over all ranks, so it does not depend on the rank count.
struct step_data {
  std::vector<seq2seq_batch> batches;
  std::vector<tensor<std::int32_t>> seeds;
  std::vector<std::vector<feed>> feeds;
  std::int64_t tokens = 0;

  step_data(long step, const setup& s, int rank, int ranks) {
    const auto idx = data().train_indices(step, s.batch, s.seed);
    const auto mine = shard_batch(idx, s.micro_batches, rank, ranks);
    const std::int64_t first = rank_micro_batches(s.micro_batches, rank, ranks).first;
    for (std::size_t k = 0; k < mine.size(); ++k) {
      batches.push_back(make_batch(data().data.train, mine[k], data().source, data().target));
      const auto j = (step - 1) * s.micro_batches + first + static_cast<std::int64_t>(k);
      seeds.emplace_back(dims_t{2},
                         std::vector<std::int32_t>{static_cast<std::int32_t>(s.seed), static_cast<std::int32_t>(j)});
      tokens += label_tokens(batches.back());
    }
    for (std::size_t k = 0; k < batches.size(); ++k) {
      const auto& b = batches[k];
      feeds.push_back(
          {{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}, {"seed", seeds[k]}});
    }
  }
};

inline trainer_options quiet(long total_steps) {
  trainer_options o;
  o.total_steps = total_steps;
  o.progress.mode = progress_mode::plain;
  o.progress.print_every = 1'000'000;
  return o;
}

/// The optimizer every run uses (Adam, warmup then cosine decay over s.total_steps).
inline std::unique_ptr<adam<float>> make_optimizer(param_store<float>& params, const setup& s) {
  auto opt = std::make_unique<adam<float>>(params, adam_options{.lr = 3e-3});
  opt->set_schedule(warmup_cosine(3e-3, 2, s.total_steps, 1e-4));
  return opt;
}

/// The settings the ranks must agree on, for data_parallel's check.
inline std::map<std::string, std::string> settings_of(const setup& s) {
  return {{"micro_batches", std::to_string(s.micro_batches)},
          {"batch", std::to_string(s.batch)},
          {"seed", std::to_string(s.seed)}};
}

/// Trains steps (from, to] — on this process alone (comm == nullptr: every micro-batch here,
/// accumulated), or as one rank of *comm. Returns each step's mean loss; `on_step(step)` runs
/// after each step.
template <class OnStep>
std::vector<double> train(const distributed::communicator* comm, param_store<float>& params, adam<float>& opt,
                          long from, long to, const setup& s, OnStep&& on_step) {
  static const auto g = loss_graph();
  auto run = g.executor<float>(params, {.threads = 1});
  trainer<float> tr(run, params, opt, quiet(s.total_steps));
  std::unique_ptr<distributed::data_parallel<float>> dp;
  if (comm) {
    dp = std::make_unique<distributed::data_parallel<float>>(
        *comm, run, params,
        distributed::data_parallel_options{
            .bucket_bytes = s.bucket_bytes, .overlap = s.overlap, .config = settings_of(s)});
    tr.set_gradient_sync(dp.get());
    if (s.shard_optimizer) dp->shard_optimizer(opt);
  }
  const int rank = comm ? comm->rank() : 0, ranks = comm ? comm->size() : 1;
  std::vector<double> losses;
  for (long step = from + 1; step <= to; ++step) {
    step_data d(step, s, rank, ranks);
    losses.push_back(tr.step(d.feeds, d.tokens));
    on_step(step);
  }
  return losses;
}
inline std::vector<double> train(const distributed::communicator* comm, param_store<float>& params, adam<float>& opt,
                                 long from, long to, const setup& s) {
  return train(comm, params, opt, from, to, s, [](long) {});
}

}  // namespace dist_test
