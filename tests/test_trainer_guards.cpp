// The trainer against non-finite values (PyTorch's clip_grad_norm_(error_if_nonfinite=True) and
// AMP's skip-on-inf), and a training log that resumes with its checkpoint.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "io_test_support.hpp"
#include "loom/loom.hpp"
#include "loom/train/trainer.hpp"
#include "test_support.hpp"

using namespace loom;
using test::message_of;

namespace {

trainer_options quiet(non_finite_action action = non_finite_action::error) {
  trainer_options o;
  o.total_steps = 10;
  o.progress.mode = progress_mode::plain;
  o.progress.print_every = 1'000'000;
  o.non_finite = action;
  return o;
}

// loss = Σ (a ⊙ b) ⊙ c. With a = 1e20, b = 1e-20, c = 1e20 in float the loss is about 1e20
// (finite), but dL/db = c ⊙ a = 1e40 overflows float: an infinite gradient under a finite loss.
auto a = param<"a", shape<fix<1>>>();
auto b = param<"b", shape<fix<1>>>();
auto c = param<"c", shape<fix<1>>>();
auto overflowing = make_graph(sum(mul(mul(a, b), c)));

const std::vector<feed> no_feeds;

param_store<float> overflowing_params() {
  param_store<float> p;
  p.set("a", tensor<float>({1}, {1e20f}));
  p.set("b", tensor<float>({1}, {1e-20f}));
  p.set("c", tensor<float>({1}, {1e20f}));
  return p;
}

}  // namespace

TEST_CASE("a finite loss with an infinite gradient stops the trainer with an error naming the parameter") {
  auto params = overflowing_params();
  const param_store<float> before = params;
  auto run = overflowing.executor<float>(params);
  adam<float> opt(params);
  trainer<float> tr(run, params, opt, quiet());
  const std::string message = message_of([&] { tr.step(no_feeds); });
  CHECK_THAT(message, Catch::Contains("step 1") && Catch::Contains("the gradient of \"b\" holds inf") &&
                          Catch::Contains("not updated"));
  CHECK(test::same_values(params, before));
  CHECK(opt.steps() == 0);
}

TEST_CASE("with non_finite = skip, a step with an infinite gradient is skipped: no update, no step counted") {
  auto params = overflowing_params();
  const param_store<float> before = params;
  auto run = overflowing.executor<float>(params);
  adam<float> opt(params);
  trainer<float> tr(run, params, opt, quiet(non_finite_action::skip));
  const double loss = tr.step(no_feeds);
  CHECK(std::isfinite(loss));
  CHECK(tr.last_step_skipped());
  CHECK(tr.skipped_steps() == 1);
  CHECK(opt.steps() == 0);
  CHECK(test::same_values(params, before));

  params.value("c")[0] = 1.0f;  // now every gradient is finite: the next step updates
  tr.step(no_feeds);
  CHECK_FALSE(tr.last_step_skipped());
  CHECK(tr.skipped_steps() == 1);
  CHECK(opt.steps() == 1);
  CHECK(params.value("b")[0] != before.value("b")[0]);
}

TEST_CASE("a NaN loss is refused by default and skipped when asked") {
  auto g = make_graph(sum(mul(a, b)));
  param_store<float> params;
  params.set("a", tensor<float>({1}, {std::numeric_limits<float>::infinity()}));
  params.set("b", tensor<float>({1}, {0.0f}));  // inf · 0 = NaN
  auto run = g.executor<float>(params);
  sgd<float> opt(params, 0.1);
  trainer<float> strict(run, params, opt, quiet());
  CHECK_THAT(message_of([&] { strict.step(no_feeds); }), Catch::Contains("the loss is NaN"));
  trainer<float> lenient(run, params, opt, quiet(non_finite_action::skip));
  CHECK(std::isnan(lenient.step(no_feeds)));
  CHECK(lenient.last_step_skipped());
  CHECK(opt.steps() == 0);
}

TEST_CASE("a resumed trainer keeps its CSV rows up to the checkpoint's step and restores its loss curves") {
  test::scratch_dir dir("trainer");
  const std::string csv = dir.file("loss.csv");
  auto x = input<"x", shape<fix<2>>>();
  auto w = param<"w", shape<fix<2>>>();
  auto g = make_graph(sum(mul(mul(x, w), w)));  // Σ x w²
  tensor<float> xs({2}, {0.5f, 1.5f});
  auto options = quiet();
  options.csv_path = csv;
  options.curve_every = 2;

  // an uninterrupted run of 6 steps, validation after step 3
  param_store<float> params;
  params.set("w", tensor<float>({2}, {1.0f, -2.0f}));
  auto run = g.executor<float>(params);
  sgd<float> opt(params, 0.05);
  std::string at_step_4;
  std::vector<std::pair<double, double>> train_at_4, valid_at_4;
  {
    trainer<float> tr(run, params, opt, options);
    for (int s = 1; s <= 6; ++s) {
      tr.step({{"x", xs}});
      if (s == 3) tr.validation(0.25);
      if (s == 4) {
        const auto bytes = test::read_bytes(csv);
        at_step_4.assign(bytes.begin(), bytes.end());
        train_at_4 = tr.train_curve();
        valid_at_4 = tr.valid_curve();
      }
    }
  }
  {  // a crash cut the last row short
    std::ofstream out(csv, std::ios::app);
    out << "7,0.12";
  }

  // resumed from a checkpoint taken at step 4: the log is as it was then
  optimizer_state<float> state;
  state.step = 4;
  opt.load_state(state);
  trainer_options resumed = options;
  resumed.resume_log = true;
  trainer<float> tr(run, params, opt, resumed);
  const auto kept = test::read_bytes(csv);
  CHECK(std::string(kept.begin(), kept.end()) == at_step_4);
  CHECK(tr.train_curve() == train_at_4);
  CHECK(tr.valid_curve() == valid_at_4);
  tr.step({{"x", xs}});
  const auto after = test::read_bytes(csv);
  const std::string text(after.begin(), after.end());
  CHECK(text.starts_with(at_step_4 + "5,"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 7);  // header, steps 1-4, validation, step 5
}

TEST_CASE("resuming a log whose header is another's is refused, and a missing log starts afresh") {
  test::scratch_dir dir("trainer");
  const std::string path = dir.file("log.csv");
  {
    csv_log other(path, {"epoch", "accuracy"});
    other.row({1, 0.5});
  }
  CHECK_THAT(message_of([&] { csv_log::resume(path, {"step", "loss"}, 10); }),
             Catch::Contains("not the header \"step,loss\""));
  // bad column names are refused before the file is touched: a log whose header holds such a
  // name (written by hand) keeps its rows past the step, which a rewrite would have dropped
  const std::string quoted = dir.file("quoted.csv");
  {
    std::ofstream out(quoted, std::ios::binary);
    out << "step,lo\"ss\n1,0.5\n2,0.25\n";
  }
  CHECK_THROWS_AS(csv_log::resume(quoted, {"step", "lo\"ss"}, 1), value_error);
  const auto untouched = test::read_bytes(quoted);
  CHECK(std::string(untouched.begin(), untouched.end()) == "step,lo\"ss\n1,0.5\n2,0.25\n");
  const std::string fresh = dir.file("fresh.csv");
  std::vector<std::vector<double>> kept{{1.0}};
  {
    auto log = csv_log::resume(fresh, {"step", "loss"}, 10, &kept);
    log.row({1, 2.5});
  }
  CHECK(kept.empty());
  const auto bytes = test::read_bytes(fresh);
  CHECK(std::string(bytes.begin(), bytes.end()) == "step,loss\n1,2.5\n");
}
