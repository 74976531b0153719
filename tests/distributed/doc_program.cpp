// Data-parallel training of a linear model: `mpirun -np 2 doc_program CHECKPOINT` (or alone).
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/data/sharding.hpp"
#include "loom/distributed/data_parallel.hpp"
#include "loom/distributed/state.hpp"
#include "loom/loom.hpp"
#include "loom/nn/linear.hpp"
#include "loom/train/trainer.hpp"

using namespace loom;

int main(int argc, char** argv) {
  return distributed::run(argc, argv, [&](distributed::communicator& world) {
    const std::string path = argc > 1 ? argv[1] : "fit.safetensors";
    const long steps = 300;
    const std::int64_t micro_batches = 4;  // per step, over all ranks: the same for any rank count
    // y = 2·x0 − x1 + 0.5, fitted by the mean squared error of each micro-batch of 4
    auto x = input<"x", shape<dyn<"B">, fix<2>>>();
    auto y = input<"y", shape<dyn<"B">, fix<1>>>();
    auto g = make_graph(scale<0.25>(sum(square(nn::linear<"fit", 1>(x) - y))));
    auto params = g.make_params<float>(1);  // rank 0's values are broadcast
    adam<float> opt(params, {.lr = 0.05});
    bool resume = world.rank() == 0 && std::filesystem::exists(path);  // only rank 0 needs the file
    world.broadcast(std::span(&resume, 1));
    if (resume) distributed::load_checkpoint(world, path, params, opt);  // before data_parallel
    auto run = g.executor<float>(params, {.threads = 1});
    distributed::data_parallel<float> dp(world, run, params, {.config = {{"micro_batches", "4"}}});
    trainer_options options;
    options.total_steps = steps;
    if (world.rank() != 0) options.progress.out = std::fopen("/dev/null", "w");  // rank 0's line only
    trainer<float> tr(run, params, opt, options);
    tr.set_gradient_sync(&dp);
    for (long step = opt.steps() + 1; step <= steps; ++step) {
      std::vector<std::size_t> batch;  // the step's 16 examples, the same on every rank
      for (std::size_t j = 0; j < 16; ++j) batch.push_back((static_cast<std::size_t>(step) * 16 + j) % 64);
      // this rank's micro-batches; feeds borrow their tensors, which must outlive tr.step
      std::vector<tensor<float>> xs, ys;
      for (const auto& part : shard_batch(batch, micro_batches, world.rank(), world.size())) {
        auto& xv = xs.emplace_back(dims_t{static_cast<std::int64_t>(part.size()), 2});
        auto& yv = ys.emplace_back(dims_t{static_cast<std::int64_t>(part.size()), 1});
        for (std::size_t r = 0; r < part.size(); ++r) {
          const float x0 = static_cast<float>(part[r]) / 64, x1 = static_cast<float>(part[r] % 7) / 7;
          xv[2 * r] = x0, xv[2 * r + 1] = x1, yv[r] = 2 * x0 - x1 + 0.5f;
        }
      }
      std::vector<std::vector<feed>> feeds;
      for (std::size_t m = 0; m < xs.size(); ++m) feeds.push_back({{"x", xs[m]}, {"y", ys[m]}});
      const double loss = tr.step(feeds);  // the mean over all ranks' micro-batches
      if (step % 100 == 0) distributed::save_checkpoint(world, path, params, opt);  // rank 0 writes
      if (step == steps && world.rank() == 0) std::printf("final loss %.6f\n", loss);
    }
    tr.finish();
    return 0;
  });
}
