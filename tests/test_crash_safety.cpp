// Crash safety, proven by killing: crash_writer (a training job's writes: loss log, checkpoint,
// loss plot) is killed with SIGKILL at random moments, 200 times, each run resuming from what
// the last one left. After every kill, whatever is on disk is exactly the content of one step:
// the checkpoint loads and holds step k's values, the log holds steps 1..k or 1..k+1 and no
// torn line, the plot is byte for byte the plot of a step n <= k. Never a torn file.
#include <catch2/catch.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "crash_files.hpp"
#include "io_test_support.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/loom.hpp"
#include "test_support.hpp"

extern char** environ;

using namespace loom;

namespace {

std::string text_of(const std::string& path) {
  const auto bytes = test::read_bytes(path);
  return {bytes.begin(), bytes.end()};
}

// The step of the checkpoint at `path`, after checking every value is that step's (0: none).
std::int64_t checked_checkpoint(const std::string& path) {
  if (!std::filesystem::exists(path)) return 0;
  param_store<float> params = crash_files::store_at(0);
  sgd<float> opt(params, 0.1, {.momentum = 0.9});
  load_checkpoint(path, params, opt);  // throws for a torn file
  const std::int64_t k = opt.steps();
  REQUIRE(k > 0);
  REQUIRE(test::same_bits(params.value("w"), crash_files::store_at(k).value("w")));
  REQUIRE(test::same_bits(opt.state().buffers.at("momentum_buffer").at("w"),
                          crash_files::state_at(k).buffers.at("momentum_buffer").at("w")));
  return k;
}

// The number of rows of the log, after checking they are steps 1..m with their losses.
std::int64_t checked_log(const std::string& path) {
  if (!std::filesystem::exists(path)) return 0;
  const std::string text = text_of(path);
  REQUIRE(text.starts_with("step,loss\n"));
  REQUIRE(text.back() == '\n');  // no torn last line
  std::int64_t m = 0;
  std::size_t pos = 10;
  for (std::size_t end; (end = text.find('\n', pos)) != std::string::npos; pos = end + 1) {
    const std::string line = text.substr(pos, end - pos);
    const auto comma = line.find(',');
    REQUIRE(comma != std::string::npos);
    std::int64_t step = 0;
    double loss = 0;
    std::from_chars(line.data(), line.data() + comma, step);
    std::from_chars(line.data() + comma + 1, line.data() + line.size(), loss);
    REQUIRE(step == ++m);
    REQUIRE(loss == crash_files::loss_at(step));
  }
  return m;
}

// The step of the plot, after checking its bytes are exactly that step's plot.
std::int64_t checked_plot(const std::string& path, const test::scratch_dir& scratch) {
  if (!std::filesystem::exists(path)) return 0;
  const std::string svg = text_of(path);
  const auto title = svg.find(">step ");
  REQUIRE(title != std::string::npos);
  std::int64_t n = 0;
  std::from_chars(svg.data() + title + 6, svg.data() + svg.size(), n);
  std::vector<std::pair<double, double>> curve;
  for (std::int64_t s = 1; s <= n; ++s) curve.emplace_back(static_cast<double>(s), crash_files::loss_at(s));
  const std::string expected = scratch.file("expected.svg");
  crash_files::plot(expected, curve, n);
  REQUIRE(svg == text_of(expected));
  return n;
}

}  // namespace

TEST_CASE("after 200 kills at random moments, the checkpoint, the log and the plot on disk are each whole") {
  test::scratch_dir dir("crash"), scratch("crash-expected");
  const crash_files::paths at(dir.path().string());
  const std::string writer = LOOM_CRASH_WRITER;
  rng gen(13);
  int kills = 0, kills_after_a_save = 0, leftover_tmp = 0;
  std::int64_t last = 0, last_plotted = 0;
  for (; kills < 200; ++kills) {
    char* argv[] = {const_cast<char*>(writer.c_str()), const_cast<char*>(dir.path().c_str()), nullptr};
    const std::uintmax_t log_size = std::filesystem::exists(at.csv) ? std::filesystem::file_size(at.csv) : 0;
    pid_t pid = 0;
    REQUIRE(::posix_spawn(&pid, writer.c_str(), nullptr, nullptr, argv, environ) == 0);
    // One kill in four at up to 40 ms from the start (loading, resuming the log); the others at
    // up to 20 ms after the writer's first new row, that is, among its steps' writes (however
    // long the start takes: under a sanitizer it takes longer than the steps).
    if (kills % 4 != 0) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while ((std::filesystem::exists(at.csv) ? std::filesystem::file_size(at.csv) : 0) <= log_size &&
             std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(gen.below(kills % 4 == 0 ? 40'000 : 20'000)));
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    INFO("kill " << kills << ": status " << status);
    REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));  // killed, not failed by itself

    const std::int64_t k = checked_checkpoint(at.checkpoint);
    const std::int64_t rows = checked_log(at.csv);
    const std::int64_t plotted = checked_plot(at.plot, scratch);
    INFO("checkpoint at step " << k << ", log of " << rows << " rows, plot of step " << plotted);
    CHECK(k >= last);  // a resumed run never goes back
    CHECK((rows == k || rows == k + 1));
    CHECK(plotted <= k);            // the plot follows the checkpoint (a run killed before redrawing
    CHECK(plotted >= last_plotted);  // it leaves an older plot, but always a whole one)
    // A kill in the microseconds between the link and the rename of a write leaves a whole
    // X.tmp (the next write of X replaces it): it must be whole too. Nothing else may be there.
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      const std::string name = e.path().filename().string(), path = e.path().string();
      INFO("file " << name);
      if (name == "checkpoint.safetensors.tmp") CHECK(checked_checkpoint(path) >= k);
      else if (name == "loss.csv.tmp") CHECK(checked_log(path) >= k);
      else if (name == "loss.svg.tmp") CHECK(checked_plot(path, scratch) >= plotted);
      else CHECK((name == "checkpoint.safetensors" || name == "loss.csv" || name == "loss.svg"));
      leftover_tmp += name.ends_with(".tmp");
    }
    kills_after_a_save += k > last;
    last = k;
    last_plotted = plotted;
  }
  INFO(kills << " kills, " << kills_after_a_save << " after at least one new save, " << leftover_tmp
             << " left a whole .tmp; last checkpoint at step " << last);
  CHECK(kills == 200);
  CHECK(kills_after_a_save >= 50);  // the kills landed all along the writes, not only at start-up
  CHECK(last >= 50);
}
