// Training end to end: a run resumed from a checkpoint continues exactly as if it had not
// been interrupted, and a few hundred steps on the translation task bring the loss down.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "loom/io/checkpoint.hpp"
#include "loom/train/trainer.hpp"
#include "test_support.hpp"
#include "translation.hpp"

using namespace loom;
using namespace translation;

namespace {

trainer_options quiet(long steps) {
  trainer_options o;
  o.total_steps = steps;
  o.progress.mode = progress_mode::plain;
  o.progress.print_every = 1'000'000;
  return o;
}

constexpr auto cfg = [] {
  auto c = config<0.1>;  // with dropout, so that its random state must resume too
  c.d_model = 16;
  c.heads = 2;
  c.ffn = 32;
  c.encoder_layers = 1;
  c.decoder_layers = 1;
  return c;
}();
using model = nn::seq2seq<cfg, nn::train_mode>;

// Runs steps (from, to] of training on the task, the dropout seed being (seed, step).
template <class Graph>
void train_steps(const Graph& g, const task& t, param_store<float>& params, adam<float>& opt, long from, long to) {
  auto run = g.template executor<float>(params, {.threads = 2});
  trainer<float> tr(run, params, opt, quiet(to));
  for (long step = from + 1; step <= to; ++step) {
    auto b = t.train_batch(step, 8, 3);
    tensor<std::int32_t> seed(dims_t{2}, {3, static_cast<std::int32_t>(step)});
    tr.step({{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}, {"seed", seed}});
  }
}

}  // namespace

TEST_CASE("training resumed from a checkpoint continues exactly as if uninterrupted") {
  const task t(9'999, 200, 10, 10, 5);
  auto g = make_graph(model::loss<pad, 0.1>());
  const auto path = (std::filesystem::temp_directory_path() / "loom_resume_test.safetensors").string();

  auto straight = g.make_params<float>(1);
  adam<float> opt_straight(straight, {.lr = 3e-3});
  opt_straight.set_schedule(warmup_cosine(3e-3, 2, 12, 1e-4));
  train_steps(g, t, straight, opt_straight, 0, 12);

  auto first = g.make_params<float>(1);
  adam<float> opt_first(first, {.lr = 3e-3});
  opt_first.set_schedule(warmup_cosine(3e-3, 2, 12, 1e-4));
  train_steps(g, t, first, opt_first, 0, 6);
  save_checkpoint(path, first, opt_first, {{"step", "6"}});

  auto resumed = g.make_params<float>(99);  // different initial values: all must come from the file
  adam<float> opt_resumed(resumed, {.lr = 3e-3});
  opt_resumed.set_schedule(warmup_cosine(3e-3, 2, 12, 1e-4));
  auto meta = load_checkpoint(path, resumed, opt_resumed);
  CHECK(meta.at("step") == "6");
  CHECK(opt_resumed.steps() == 6);
  train_steps(g, t, resumed, opt_resumed, 6, 12);

  CHECK(test::same_values(straight, resumed));
  // and the parameters did move: the comparison is not between two untouched stores
  CHECK_FALSE(test::same_values(straight, g.make_params<float>(1)));
  std::filesystem::remove(path);
}

TEST_CASE("a few hundred steps on the translation task bring the loss down") {
  const task t(99'999, 2'000, 50, 50, 7);
  constexpr auto small = [] {
    auto c = config<0.0>;
    c.d_model = 32;
    c.ffn = 64;
    c.encoder_layers = 1;
    c.decoder_layers = 1;
    return c;
  }();
  auto g = make_graph(nn::seq2seq<small, nn::train_mode>::loss<pad>());
  auto params = g.make_params<float>(2);
  auto run = g.executor<float>(params);
  adam<float> opt(params, {.lr = 2e-3});
  trainer<float> tr(run, params, opt, quiet(300));
  double first = 0, last = 0;
  for (long step = 1; step <= 300; ++step) {
    auto b = t.train_batch(step, 32, 1);
    double loss = tr.step({{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}});
    if (step <= 10) first += loss / 10;
    if (step > 290) last += loss / 10;
  }
  CHECK(first > 2.5);       // about log(35) at the start
  CHECK(last < 0.5 * first);
  CHECK(tr.train_curve().size() == 30);
}
