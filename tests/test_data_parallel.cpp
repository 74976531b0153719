// The single-process pieces of data parallelism: the executor's "gradient final" callback,
// gradient accumulation in the documented tree order, the trainer over micro-batches, and how a
// step's batch is cut between ranks and micro-batches. (The MPI part: tests/distributed/.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <numeric>
#include <vector>

#include "loom/data/sharding.hpp"
#include "loom/loom.hpp"
#include "loom/nn/linear.hpp"
#include "loom/train/trainer.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

// l1 is applied twice, so its weight and bias get two contributions each (fan-in).
auto model_loss() {
  auto x = input<"x", shape<dyn<"B">, fix<4>>>();
  auto target = input<"target", shape<dyn<"B">>, int>();
  auto h = relu(nn::linear<"l1", 4>(x));
  auto h2 = relu(nn::linear<"l1", 4>(h));
  return cross_entropy(nn::linear<"out", 3>(h2), target);
}

struct micro_batch {
  tensor<float> x;
  tensor<std::int32_t> target;
  std::vector<feed> feeds() const { return {{"x", x}, {"target", target}}; }
};

micro_batch make_micro_batch(std::int64_t rows, std::uint64_t seed) {
  micro_batch m{test::random_tensor<float>({rows, 4}, seed), tensor<std::int32_t>(dims_t{rows})};
  for (std::int64_t i = 0; i < rows; ++i)
    m.target[i] = static_cast<std::int32_t>((seed + static_cast<std::uint64_t>(i)) % 3);
  return m;
}

trainer_options quiet() {
  trainer_options o;
  o.clip_norm = 0;
  o.progress.mode = progress_mode::plain;
  o.progress.print_every = 1'000'000;
  return o;
}

// A store of one parameter "p" of `n` elements, whose gradient the test sets by hand.
param_store<float> one_parameter(std::int64_t n) {
  param_store<float> s;
  s.set("p", tensor<float>(dims_t{n}));
  return s;
}

// Pushes micro-batches whose gradients are the given values (one per element: values[k][e]),
// then finishes; returns the gradient.
std::vector<float> accumulate(const std::vector<std::vector<float>>& values, std::int64_t divisor = 1) {
  auto store = one_parameter(static_cast<std::int64_t>(values[0].size()));
  gradient_accumulator<float> acc(store);
  for (std::size_t k = 0; k < values.size(); ++k) {
    std::copy(values[k].begin(), values[k].end(), store.grad("p").data());
    if (k + 1 < values.size()) acc.push();
  }
  acc.finish_all(divisor);
  const auto& g = store.grad("p");
  return {g.data(), g.data() + g.size()};
}

}  // namespace

TEST_CASE("the gradient-final callback reports each parameter once, with its final gradient") {
  auto g = make_graph(model_loss());
  auto params = g.make_params<float>(3);
  auto run = g.executor<float>(params, {.threads = 4});
  const auto plan = run.plan();
  std::vector<std::vector<float>> seen(static_cast<std::size_t>(plan.size()));
  std::vector<std::atomic<int>> calls(static_cast<std::size_t>(plan.size()));
  run.on_gradient_final([&](int node) {
    const auto& grad = params.grad(plan.order[node]->name);
    seen[static_cast<std::size_t>(node)].assign(grad.data(), grad.data() + grad.size());  // one writer per node
    calls[static_cast<std::size_t>(node)].fetch_add(1);
  });
  const auto m = make_micro_batch(6, 1);
  for (int pass = 1; pass <= 3; ++pass) {
    run.forward(m.feeds());
    run.backward();
    int reported = 0;
    for (int i = 0; i < plan.size(); ++i) {
      if (plan.order[i]->op->role != node_role::param) {
        CHECK(calls[static_cast<std::size_t>(i)].load() == 0);
        continue;
      }
      ++reported;
      CHECK(calls[static_cast<std::size_t>(i)].load() == pass);
      const auto& grad = params.grad(plan.order[i]->name);
      CHECK(seen[static_cast<std::size_t>(i)] == std::vector<float>(grad.data(), grad.data() + grad.size()));
    }
    CHECK(reported == 4);  // l1.weight, l1.bias, out.weight, out.bias
  }
}

TEST_CASE("four micro-batches are summed as (g0 + g1) + (g2 + g3), not left to right") {
  // in float, 1e8 + 1 == 1e8 (the spacing there is 8): the tree gives (1e8) + (-1e8) = 0 where
  // ((1e8 + 1) - 1e8) + 1 would give 1
  CHECK(accumulate({{1e8f}, {1.f}, {-1e8f}, {1.f}}) == std::vector<float>{0.f});
  CHECK(accumulate({{1.f}, {1e8f}, {1.f}, {-1e8f}}) == std::vector<float>{0.f});
}

TEST_CASE("three micro-batches are summed as (g0 + g1) + g2, six as ((g0 + g1) + (g2 + g3)) + (g4 + g5)") {
  // (1 + 1e8) - 1e8 = 0, where 1 + (1e8 - 1e8) would give 1
  CHECK(accumulate({{1.f}, {1e8f}, {-1e8f}}) == std::vector<float>{0.f});
  // ((1e8 + 1) + (1 + 1)) + (-1e8 + 1): 1e8 + 1 and 1e8 + 2 round to 1e8, -1e8 + 1 to -1e8, and
  // the total is 0; left to right, 1e8 + 1 + 1 + 1 stays 1e8, minus 1e8 is 0, plus 1 is 1
  CHECK(accumulate({{1e8f}, {1.f}, {1.f}, {1.f}, {-1e8f}, {1.f}}) == std::vector<float>{0.f});
}

TEST_CASE("accumulated gradients divided by the micro-batch count are their mean") {
  CHECK(accumulate({{1.f, -2.f}, {2.f, 4.f}, {3.f, 1.f}}, 3) == std::vector<float>{2.f, 1.f});
  CHECK(accumulate({{5.f}}, 1) == std::vector<float>{5.f});
}

TEST_CASE("losses are summed in the same tree order") {
  CHECK(tree_sum(std::vector<double>{}) == 0.0);
  CHECK(tree_sum(std::vector<double>{2.5}) == 2.5);
  // in double, 1e16 + 1 == 1e16: (1e16 + 1) + (-1e16 + 1) = 0, left to right 1
  CHECK(tree_sum(std::vector<double>{1e16, 1, -1e16, 1}) == 0.0);
}

TEST_CASE("a trainer step over two micro-batches applies the mean of their gradients") {
  auto g = make_graph(model_loss());
  const auto a = make_micro_batch(5, 11), b = make_micro_batch(5, 12);

  // by hand: each micro-batch's gradient, their sum, divided by two
  auto reference = g.make_params<float>(7);
  auto run_ref = g.executor<float>(reference, {.threads = 2});
  std::map<std::string, std::vector<float>> expected;
  double loss_a = 0, loss_b = 0;
  run_ref.forward(a.feeds());
  loss_a = run_ref.output()[0];
  run_ref.backward();
  for (auto& [name, e] : reference) expected[name].assign(e.grad.data(), e.grad.data() + e.grad.size());
  run_ref.forward(b.feeds());
  loss_b = run_ref.output()[0];
  run_ref.backward();
  for (auto& [name, e] : reference)
    for (std::int64_t i = 0; i < e.grad.size(); ++i)
      expected[name][static_cast<std::size_t>(i)] = (expected[name][static_cast<std::size_t>(i)] + e.grad[i]) / 2.f;

  // the trainer, with a learning rate of 0 so that the gradients stay to be read
  auto params = g.make_params<float>(7);
  auto run = g.executor<float>(params, {.threads = 2});
  sgd<float> opt(params, 0.0);
  trainer<float> tr(run, params, opt, quiet());
  const std::vector<std::vector<feed>> micro{a.feeds(), b.feeds()};
  const double loss = tr.step(micro);
  CHECK(loss == (loss_a + loss_b) / 2);
  for (auto& [name, e] : params) {
    INFO(name);
    CHECK(std::vector<float>(e.grad.data(), e.grad.data() + e.grad.size()) == expected[name]);
  }
}

TEST_CASE("a trainer step over one micro-batch is the plain step") {
  auto g = make_graph(model_loss());
  const auto a = make_micro_batch(7, 21);
  auto plain = g.make_params<float>(5), micro = g.make_params<float>(5);
  auto run_plain = g.executor<float>(plain, {.threads = 2});
  auto run_micro = g.executor<float>(micro, {.threads = 2});
  adam<float> opt_plain(plain, {.lr = 1e-2}), opt_micro(micro, {.lr = 1e-2});
  // by hand: forward, backward, clip, Adam
  for (int step = 0; step < 3; ++step) {
    run_plain.forward(a.feeds());
    run_plain.backward();
    clip_grad_norm(plain, 1.0);
    opt_plain.step();
  }
  auto options = quiet();
  options.clip_norm = 1.0;
  trainer<float> tr(run_micro, micro, opt_micro, options);
  const std::vector<std::vector<feed>> one{a.feeds()};
  for (int step = 0; step < 3; ++step) tr.step(one);
  CHECK(test::same_values(plain, micro));
  CHECK_FALSE(test::same_values(plain, g.make_params<float>(5)));  // and they moved
}

TEST_CASE("a trainer step without micro-batches is refused") {
  auto g = make_graph(model_loss());
  auto params = g.make_params<float>(5);
  auto run = g.executor<float>(params);
  sgd<float> opt(params, 0.1);
  trainer<float> tr(run, params, opt, quiet());
  CHECK(test::message_of([&] { tr.step(std::span<const std::vector<feed>>()); }) ==
        "trainer: a step needs at least one micro-batch");
}

TEST_CASE("each rank takes its own consecutive micro-batches of a step's batch") {
  const std::vector<std::size_t> batch{10, 11, 12, 13, 14, 15, 16, 17};
  using lists = std::vector<std::vector<std::size_t>>;
  CHECK(shard_batch(batch, 4, 0, 1) == lists{{10, 11}, {12, 13}, {14, 15}, {16, 17}});
  CHECK(shard_batch(batch, 4, 0, 2) == lists{{10, 11}, {12, 13}});
  CHECK(shard_batch(batch, 4, 1, 2) == lists{{14, 15}, {16, 17}});
  CHECK(shard_batch(batch, 4, 3, 4) == lists{{16, 17}});
  CHECK(rank_micro_batches(6, 2, 3).first == 4);
  CHECK(rank_micro_batches(6, 2, 3).count == 2);
}

TEST_CASE("a batch that does not split evenly between ranks or micro-batches is refused, saying why") {
  const std::vector<std::size_t> batch{1, 2, 3, 4, 5, 6};
  CHECK(test::message_of([&] { shard_batch(batch, 3, 0, 2); }) ==
        "rank_micro_batches: 3 micro-batches per step cannot go to 2 ranks in equal shares (give a multiple of the "
        "rank count)");
  CHECK(test::message_of([&] { shard_batch(batch, 4, 0, 2); }) ==
        "shard_batch: a batch of 6 examples cannot be cut into 4 micro-batches of equal size");
  CHECK(test::message_of([&] { rank_micro_batches(4, 2, 2); }) ==
        "rank_micro_batches: rank 2 of 2 ranks does not exist");
}

TEST_CASE("the epoch sampler shows every example once per epoch, in an order fixed by the seed") {
  epoch_sampler sampler(10, 4, 7);
  std::vector<std::size_t> seen;
  for (int step = 1; step <= 5; ++step) {  // 20 positions: two epochs
    auto b = sampler.batch(step);
    CHECK(b.size() == 4);
    seen.insert(seen.end(), b.begin(), b.end());
  }
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::size_t> one(seen.begin() + 10 * epoch, seen.begin() + 10 * (epoch + 1));
    std::sort(one.begin(), one.end());
    std::vector<std::size_t> all(10);
    std::iota(all.begin(), all.end(), std::size_t{0});
    CHECK(one == all);
  }
  CHECK(std::vector<std::size_t>(seen.begin(), seen.begin() + 10) !=
        std::vector<std::size_t>(seen.begin() + 10, seen.end()));  // a new order each epoch
  epoch_sampler again(10, 4, 7), other(10, 4, 8);
  CHECK(again.batch(3) == std::vector<std::size_t>(seen.begin() + 8, seen.begin() + 12));
  CHECK(other.order(0) != again.order(0));
}
