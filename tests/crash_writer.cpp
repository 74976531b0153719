// The process test_crash_safety kills: it resumes from what it finds in DIR (checkpoint, loss
// log) and then, step after step until killed, appends a row to loss.csv, saves a checkpoint
// and redraws loss.svg, as a training job does. Every value is a function of the step, so the
// test can tell an old file from a new one from a torn one.
//
//   crash_writer DIR
#include <cstdio>
#include <filesystem>
#include <string>

#include "loom/io/checkpoint.hpp"
#include "loom/train/progress.hpp"
#include "crash_files.hpp"

using namespace loom;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: crash_writer DIR\n");
    return 2;
  }
  const crash_files::paths at(argv[1]);
  param_store<float> params = crash_files::store_at(0);
  sgd<float> opt(params, 0.1, {.momentum = 0.9});
  if (std::filesystem::exists(at.checkpoint)) load_checkpoint(at.checkpoint, params, opt);
  std::vector<std::vector<double>> rows;
  csv_log log = csv_log::resume(at.csv, {"step", "loss"}, static_cast<double>(opt.steps()), &rows);
  std::vector<std::pair<double, double>> curve;
  for (const auto& r : rows) curve.emplace_back(r[0], r[1]);

  for (std::int64_t step = opt.steps() + 1;; ++step) {
    // the log first, then the checkpoint: a resumed run keeps the rows up to its checkpoint
    log.row({static_cast<double>(step), crash_files::loss_at(step)});
    curve.emplace_back(static_cast<double>(step), crash_files::loss_at(step));
    params = crash_files::store_at(step);
    opt.load_state(crash_files::state_at(step));
    save_checkpoint(at.checkpoint, params, opt, {{"writer", "crash_writer"}});
    crash_files::plot(at.plot, curve, step);
  }
}
