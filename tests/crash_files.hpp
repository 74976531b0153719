// What crash_writer writes at each step, shared with test_crash_safety, which checks that
// whatever is on disk after a kill is exactly the content of one step.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/params.hpp"
#include "loom/train/optim.hpp"
#include "loom/train/progress.hpp"

namespace crash_files {

struct paths {
  explicit paths(const std::string& dir)
      : checkpoint(dir + "/checkpoint.safetensors"), csv(dir + "/loss.csv"), plot(dir + "/loss.svg") {}
  std::string checkpoint, csv, plot;
};

constexpr std::int64_t weights = 1 << 16;  // 256 KiB of parameters: a save takes a while

/// The parameters after `step` steps: w[i] = step + (i mod 1024), exact in float.
inline loom::param_store<float> store_at(std::int64_t step) {
  loom::tensor<float> w(loom::dims_t{weights});
  for (std::int64_t i = 0; i < weights; ++i) w[i] = static_cast<float>(step + i % 1024);
  loom::param_store<float> p;
  p.set("w", std::move(w));
  return p;
}

/// SGD's state after `step` steps: momentum_buffer[i] = −step (none at step 0).
inline loom::optimizer_state<float> state_at(std::int64_t step) {
  loom::optimizer_state<float> s;
  s.step = step;
  if (step > 0) {
    loom::tensor<float> m(loom::dims_t{weights});
    m.fill(static_cast<float>(-step));
    s.buffers["momentum_buffer"]["w"] = std::move(m);
  }
  return s;
}

/// The loss logged at `step`.
inline double loss_at(std::int64_t step) { return 1.0 / static_cast<double>(step); }

/// The loss curve of steps 1..step, titled with the step.
inline void plot(const std::string& path, const std::vector<std::pair<double, double>>& curve, std::int64_t step) {
  loom::write_loss_curve_svg(path, curve, {}, "step " + std::to_string(step));
}

}  // namespace crash_files
