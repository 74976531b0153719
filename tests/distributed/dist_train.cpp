// A small data-parallel training job for the failure tests (failure_test.sh), and a checker of
// its checkpoints.
//
//   mpirun -np 2 dist_train --out DIR [--steps N] [--checkpoint-every C] [--timeout S]
//                           [--fail-rank R --fail-status S]
//                           [--die-at-step K --die-rank R | --hang-at-step K --hang-rank R]
//       trains the tiny model of dist_support.hpp; rank 0 writes DIR/checkpoint.safetensors every
//       C steps. With --die-at-step, rank R kills itself (SIGKILL) when step K begins, while the
//       others go into step K; with --hang-at-step it stops answering instead (sleeps). With
//       --fail-rank R --fail-status S, the body of rank R (of every rank when R is -1) returns S
//       after training instead of 0.
//   dist_train --verify FILE --expect-step K
//       (no MPI) loads FILE and exits 0 if it holds step K of an uninterrupted run, bit for bit:
//       the same parameters and optimizer state as one process accumulating the same micro-batches.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "dist_support.hpp"
#include "loom/distributed/state.hpp"

using namespace loom;
using namespace dist_test;

namespace {

struct options {
  std::string out, verify;
  long steps = 1000, checkpoint_every = 3, expect_step = -1;
  long die_at = -1, hang_at = -1;
  int die_rank = -1, hang_rank = -1;
  double timeout = 30;
  int fail_rank = -2, fail_status = 0;  // --fail-rank R --fail-status S: rank R (-1: all) returns S
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (arg("--out"))
      o.out = argv[++i];
    else if (arg("--verify"))
      o.verify = argv[++i];
    else if (arg("--steps"))
      o.steps = std::stol(argv[++i]);
    else if (arg("--checkpoint-every"))
      o.checkpoint_every = std::stol(argv[++i]);
    else if (arg("--expect-step"))
      o.expect_step = std::stol(argv[++i]);
    else if (arg("--die-at-step"))
      o.die_at = std::stol(argv[++i]);
    else if (arg("--die-rank"))
      o.die_rank = std::stoi(argv[++i]);
    else if (arg("--hang-at-step"))
      o.hang_at = std::stol(argv[++i]);
    else if (arg("--hang-rank"))
      o.hang_rank = std::stoi(argv[++i]);
    else if (arg("--timeout"))
      o.timeout = std::stod(argv[++i]);
    else if (arg("--fail-rank"))
      o.fail_rank = std::stoi(argv[++i]);
    else if (arg("--fail-status"))
      o.fail_status = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "dist_train: unknown argument %s (see the comment at the top of dist_train.cpp)\n", argv[i]);
      std::exit(2);
    }
  }
  return o;
}

setup job_setup(long steps) {
  setup s;
  s.total_steps = steps;
  return s;
}

int verify(const options& o) {
  const setup s = job_setup(o.steps);
  auto loaded = loss_graph().make_params<float>(99);
  auto opt_loaded = make_optimizer(loaded, s);
  load_checkpoint(o.verify, loaded, *opt_loaded);
  auto straight = loss_graph().make_params<float>(1);
  auto opt_straight = make_optimizer(straight, s);
  train(nullptr, straight, *opt_straight, 0, o.expect_step, s);
  if (opt_loaded->steps() != o.expect_step) {
    std::printf("checkpoint %s holds step %lld, expected %ld\n", o.verify.c_str(),
                static_cast<long long>(opt_loaded->steps()), o.expect_step);
    return 1;
  }
  for (const auto& name : straight.names())
    if (std::memcmp(straight.value(name).data(), loaded.value(name).data(),
                    sizeof(float) * static_cast<std::size_t>(straight.value(name).size())) != 0) {
      std::printf("checkpoint %s: parameter %s differs from an uninterrupted run's\n", o.verify.c_str(), name.c_str());
      return 1;
    }
  std::printf("checkpoint %s: step %ld, the same bits as an uninterrupted run\n", o.verify.c_str(), o.expect_step);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  if (!o.verify.empty()) return verify(o);
  return distributed::run(argc, argv, [&](distributed::communicator& world) {
    world.set_timeout(o.timeout);
    const setup s = job_setup(o.steps);
    auto params = loss_graph().make_params<float>(1);
    auto opt = make_optimizer(params, s);
    const std::string path = o.out + "/checkpoint.safetensors";
    const int me = world.rank();
    // (step, loss) from rank 0; the checkpoint every C steps from rank 0 too
    long step = 0;
    auto after_step = [&](long done) {
      step = done;
      if (done % o.checkpoint_every == 0) {
        distributed::save_checkpoint(world, path, params, *opt, {{"step", std::to_string(done)}});
        if (me == 0) std::printf("step %ld: checkpoint written\n", done);
      }
      if (me == 0) std::fflush(stdout);
      if (done + 1 == o.die_at && me == o.die_rank) {
        std::fprintf(stderr, "dist_train: rank %d kills itself at the start of step %ld\n", me, done + 1);
        std::raise(SIGKILL);
      }
      if (done + 1 == o.hang_at && me == o.hang_rank) {
        std::fprintf(stderr, "dist_train: rank %d stops answering at the start of step %ld\n", me, done + 1);
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    };
    train(&world, params, *opt, 0, o.steps, s, after_step);
    if (me == 0) std::printf("trained %ld steps\n", step);
    if (o.fail_rank == -1 || o.fail_rank == me) {
      std::fprintf(stderr, "dist_train: rank %d returns %d\n", me, o.fail_status);
      return o.fail_status;
    }
    return 0;
  });
}
