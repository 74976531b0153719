// Data-parallel training over MPI, run by CTest as `mpirun -np N test_distributed "<test name>"`
// (tests/distributed/CMakeLists.txt). Every rank runs the test case; a failed check on any rank
// fails the job. Comparisons with rank 0 use plain MPI_Bcast, not the code under test.
#include <mpi.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "dist_support.hpp"
#include "io_test_support.hpp"
#include "distributed/tree.hpp"
#include "loom/distributed/state.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace dist_test;
using Catch::Matchers::Contains;

loom::distributed::communicator& test_world();  // all the ranks (test_distributed_main.cpp)

namespace {

distributed::communicator& world() {
  return test_world();
}

// Whether every parameter holds rank 0's bytes.
bool same_as_rank_0(param_store<float>& params) {
  bool same = true;
  for (auto& [name, e] : params) {
    std::vector<float> root(e.value.data(), e.value.data() + e.value.size());
    MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    same = same && std::memcmp(root.data(), e.value.data(), root.size() * sizeof(float)) == 0;
  }
  return same;
}

param_store<float> fresh(std::uint64_t seed) {
  return loss_graph().make_params<float>(seed);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("loom_dist_" + name + ".safetensors")).string();
}

// loss = Σ c ⊙ p: p's gradient is exactly the input c, so each rank chooses its gradient.
auto chosen_gradient_loss() {
  auto c = input<"c", shape<fix<11>>>();
  return sum(mul(c, param<"p", shape<fix<11>>>()));
}

}  // namespace

TEST_CASE("after eight steps every rank holds the same parameters, bit for bit") {
  setup s;
  auto params = fresh(1 + static_cast<std::uint64_t>(world().rank()));  // different: rank 0's are broadcast
  auto opt = make_optimizer(params, s);
  train(&world(), params, *opt, 0, 8, s);
  CHECK(same_as_rank_0(params));
  CHECK_FALSE(test::same_values(params, fresh(1)));  // they moved
  // and the ranks trained on different examples
  CHECK_FALSE(test::same_bits(step_data(1, s, 0, 2).batches[0].src, step_data(1, s, 1, 2).batches[0].src));
}

TEST_CASE("two ranks with one micro-batch each give the bits of one process accumulating both") {
  setup s;
  auto params = fresh(1), alone = fresh(1);
  auto opt = make_optimizer(params, s), opt_alone = make_optimizer(alone, s);
  const auto losses = train(&world(), params, *opt, 0, 8, s);
  const auto losses_alone = train(nullptr, alone, *opt_alone, 0, 8, s);  // both micro-batches here
  CHECK(test::same_values(params, alone));
  CHECK(losses == losses_alone);
  CHECK_FALSE(test::same_values(params, fresh(1)));
}

TEST_CASE("two ranks with two micro-batches each give the bits of one process accumulating four") {
  setup s;
  s.micro_batches = 4;
  auto params = fresh(1), alone = fresh(1);
  auto opt = make_optimizer(params, s), opt_alone = make_optimizer(alone, s);
  const auto losses = train(&world(), params, *opt, 0, 6, s);
  const auto losses_alone = train(nullptr, alone, *opt_alone, 0, 6, s);
  CHECK(test::same_values(params, alone));
  CHECK(losses == losses_alone);
}

TEST_CASE("neither the bucket size nor overlapping with backward changes a bit") {
  setup one_bucket, many_buckets;
  one_bucket.bucket_bytes = 1 << 20;
  one_bucket.overlap = false;
  many_buckets.bucket_bytes = 512;
  auto a = fresh(1), b = fresh(1);
  auto opt_a = make_optimizer(a, one_bucket), opt_b = make_optimizer(b, many_buckets);
  train(&world(), a, *opt_a, 0, 5, one_bucket);
  train(&world(), b, *opt_b, 0, 5, many_buckets);
  CHECK(test::same_values(a, b));
  // the two layouts differ indeed
  auto g = loss_graph();
  auto params = fresh(1);
  auto run = g.executor<float>(params, {.threads = 1});
  distributed::data_parallel<float> one(world(), run, params, {.bucket_bytes = 1 << 20});
  CHECK(one.buckets() == 1);
  distributed::data_parallel<float> many(world(), run, params, {.bucket_bytes = 512});
  CHECK(many.buckets() > 10);
}

TEST_CASE("a run resumed on two ranks from a one-rank checkpoint continues as if uninterrupted") {
  setup s;
  const auto path = temp_path("one_to_two");
  auto straight = fresh(1);
  auto opt_straight = make_optimizer(straight, s);
  train(nullptr, straight, *opt_straight, 0, 8, s);  // uninterrupted, one process

  if (world().rank() == 0) {  // rank 0 alone, as a job of one rank: steps 1-4
    auto solo = world().split(0);
    auto first = fresh(1);
    auto opt_first = make_optimizer(first, s);
    train(&solo, first, *opt_first, 0, 4, s);
    distributed::save_checkpoint(solo, path, first, *opt_first, {{"step", "4"}});
  } else {
    world().split(1);  // split is collective over the world
  }
  world().barrier();

  auto resumed = fresh(99);  // other values: everything must come from the file
  auto opt_resumed = make_optimizer(resumed, s);
  const auto meta = distributed::load_checkpoint(world(), path, resumed, *opt_resumed);
  CHECK(meta.at("step") == "4");
  CHECK(opt_resumed->steps() == 4);
  train(&world(), resumed, *opt_resumed, 4, 8, s);
  CHECK(test::same_values(resumed, straight));
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove(path);
}

TEST_CASE("a run resumed on one rank from a two-rank checkpoint continues as if uninterrupted") {
  setup s;
  const auto path = temp_path("two_to_one");
  auto straight = fresh(1);
  auto opt_straight = make_optimizer(straight, s);
  train(nullptr, straight, *opt_straight, 0, 8, s);

  auto first = fresh(1);
  auto opt_first = make_optimizer(first, s);
  train(&world(), first, *opt_first, 0, 4, s);  // steps 1-4 on both ranks
  distributed::save_checkpoint(world(), path, first, *opt_first, {{"step", "4"}});

  auto solo = world().split(world().rank());  // then each rank alone, as a job of one rank
  auto resumed = fresh(99);
  auto opt_resumed = make_optimizer(resumed, s);
  const auto meta = distributed::load_checkpoint(solo, path, resumed, *opt_resumed);
  CHECK(meta.at("step") == "4");
  train(&solo, resumed, *opt_resumed, 4, 8, s);
  CHECK(test::same_values(resumed, straight));
  world().barrier();
  if (world().rank() == 0) std::filesystem::remove(path);
}

// The elements of the optimizer buffers this rank holds.
std::int64_t buffer_elements(const optimizer<float>& opt) {
  std::int64_t n = 0;
  for (const auto& [kind, by_param] : opt.state().buffers)
    for (const auto& [name, t] : by_param) n += t.size();
  return n;
}

bool same_file(const std::string& a, const std::string& b) {
  return test::read_bytes(a) == test::read_bytes(b);  // io_test_support.hpp
}

TEST_CASE("with the optimizer sharded, 100 steps write the checkpoint of one process, byte for byte") {
  setup s;
  s.micro_batches = 4;
  s.total_steps = 100;
  s.shard_optimizer = true;
  const auto sharded_path = temp_path("sharded"), alone_path = temp_path("sharded_alone");
  auto params = fresh(1), alone = fresh(1);
  auto opt = make_optimizer(params, s), opt_alone = make_optimizer(alone, s);
  const auto losses = train(&world(), params, *opt, 0, 100, s);
  setup unsharded = s;
  unsharded.shard_optimizer = false;
  const auto losses_alone = train(nullptr, alone, *opt_alone, 0, 100, unsharded);
  CHECK(losses == losses_alone);
  CHECK(test::same_values(params, alone));
  // each rank holds its share of Adam's moments: about 1/N of them
  const std::int64_t mine = buffer_elements(*opt), all = buffer_elements(*opt_alone);
  const auto ranks = static_cast<double>(world().size());
  INFO("rank " << world().rank() << " holds " << mine << " of " << all << " buffer elements");
  CHECK(all == 2 * params.numel());
  CHECK(static_cast<double>(mine) <= (1.0 / ranks + 0.05) * static_cast<double>(all));
  const auto sizes = world().all_gather(static_cast<std::uint64_t>(mine));
  std::uint64_t total = 0;
  for (auto n : sizes) total += n;
  CHECK(total == static_cast<std::uint64_t>(all));  // every moment on exactly one rank

  distributed::save_checkpoint(world(), sharded_path, params, *opt, {{"run", "x"}});
  if (world().rank() == 0) {
    save_checkpoint(alone_path, alone, *opt_alone, {{"run", "x"}});
    CHECK(same_file(sharded_path, alone_path));
  }
  world().barrier();

  // The whole checkpoint resumes into an optimizer sharded afterwards, into one sharded before
  // the load, and on one process: 4 more steps give the bits of the uninterrupted run.
  auto resumed = fresh(99), resumed_sharded = fresh(98), resumed_alone = fresh(97);
  auto opt_resumed = make_optimizer(resumed, s), opt_sharded = make_optimizer(resumed_sharded, s),
       opt_resumed_alone = make_optimizer(resumed_alone, s);
  distributed::load_checkpoint(world(), sharded_path, resumed, *opt_resumed);
  train(&world(), resumed, *opt_resumed, 100, 104, s);                // shards, then 4 steps
  train(&world(), resumed_sharded, *opt_sharded, 0, 0, s);            // shards, no step
  REQUIRE(opt_sharded->sharded() == (world().size() > 1));
  distributed::load_checkpoint(world(), sharded_path, resumed_sharded, *opt_sharded);
  CHECK(buffer_elements(*opt_sharded) == mine);                       // loaded whole, kept its share
  train(&world(), resumed_sharded, *opt_sharded, 100, 104, s);
  auto solo = world().split(world().rank());
  distributed::load_checkpoint(solo, sharded_path, resumed_alone, *opt_resumed_alone);
  train(&solo, resumed_alone, *opt_resumed_alone, 100, 104, unsharded);
  train(nullptr, alone, *opt_alone, 100, 104, unsharded);
  CHECK(test::same_values(resumed, alone));
  CHECK(test::same_values(resumed_sharded, alone));
  CHECK(test::same_values(resumed_alone, alone));
  world().barrier();
  if (world().rank() == 0) {
    std::filesystem::remove(sharded_path);
    std::filesystem::remove(alone_path);
  }
}

TEST_CASE("the ranks' gradients are summed in the documented tree order") {
  // float: 1e8 + 1 rounds to 1e8 (the spacing there is 8), so the order of additions shows
  const int n = world().size(), r = world().rank();
  REQUIRE((n == 3 || n == 4));
  std::vector<std::vector<float>> patterns;  // per pattern: each rank's value
  std::vector<float> expected;               // per pattern: the mean in the documented order
  if (n == 4) {
    patterns = {{1e8f, 1, -1e8f, 1}, {1, 1e8f, 1, -1e8f}, {0.5f, 1, 2, 3}};
    expected = {0, 0, 6.5f / 4};  // (1e8 + 1) + (-1e8 + 1) = 0 where left to right gives 1
  } else {
    patterns = {{1, 1e8f, -1e8f}, {1e8f, -1e8f, 1}, {0.5f, 1, 2}};
    expected = {0, 1.f / 3, 3.5f / 3};  // (1 + 1e8) - 1e8 = 0 where 1 + (1e8 - 1e8) gives 1
  }
  tensor<float> c(dims_t{11});
  for (int e = 0; e < 11; ++e) c[e] = patterns[static_cast<std::size_t>(e % 3)][static_cast<std::size_t>(r)];

  auto g = make_graph(chosen_gradient_loss());
  auto params = g.make_params<float>(1);
  auto run = g.executor<float>(params, {.threads = 1});
  distributed::data_parallel<float> dp(world(), run, params, {.bucket_bytes = 16});
  sgd<float> opt(params, 0.0);  // the gradient stays to be read
  auto options = quiet(1);
  options.clip_norm = 0;
  trainer<float> tr(run, params, opt, options);
  tr.set_gradient_sync(&dp);
  tr.step({{"c", c}});
  for (int e = 0; e < 11; ++e) {
    INFO("element " << e);
    CHECK(params.grad("p")[e] == expected[static_cast<std::size_t>(e % 3)]);
  }
}

TEST_CASE("each rank's share of the additions follows the documented tree") {
  using distributed::detail::role_of;
  // four ranks, chunk 0 (its total ends on rank 0): (x0 + x1) on rank 0, (x2 + x3) on rank 2,
  // then rank 2's sum goes to rank 0 as the right operand
  CHECK(role_of(0, 4, 0).receive_from == std::vector<int>{1, 2});
  CHECK(role_of(0, 4, 0).peer_is_left == std::vector<std::uint8_t>{0, 0});
  CHECK(role_of(0, 4, 0).send_to == -1);
  CHECK(role_of(1, 4, 0).receive_from.empty());
  CHECK(role_of(1, 4, 0).send_to == 0);
  CHECK(role_of(2, 4, 0).receive_from == std::vector<int>{3});
  CHECK(role_of(2, 4, 0).send_to == 0);
  CHECK(role_of(3, 4, 0).send_to == 2);
  // chunk 3 ends on rank 3: (x0 + x1) on rank 1 (target 0 + 3 mod 2), (x2 + x3) on rank 3, and
  // rank 1's sum arrives on rank 3 as the left operand
  CHECK(role_of(3, 4, 3).receive_from == std::vector<int>{2, 1});
  CHECK(role_of(3, 4, 3).peer_is_left == std::vector<std::uint8_t>{1, 1});
  CHECK(role_of(1, 4, 3).receive_from == std::vector<int>{0});
  CHECK(role_of(1, 4, 3).send_to == 3);
  // three ranks, chunk 2: (x0 + x1) on rank 0 (target 2 mod 2), then + x2 on rank 2
  CHECK(role_of(2, 3, 2).receive_from == std::vector<int>{0});
  CHECK(role_of(2, 3, 2).peer_is_left == std::vector<std::uint8_t>{1});
  CHECK(role_of(0, 3, 2).receive_from == std::vector<int>{1});
  CHECK(role_of(0, 3, 2).send_to == 2);
  // one rank: nothing to send or receive
  CHECK(role_of(0, 1, 0).receive_from.empty());
  CHECK(role_of(0, 1, 0).send_to == -1);
}

TEST_CASE("ranks started with different settings are refused, naming the rank and the setting") {
  auto g = make_graph(chosen_gradient_loss());
  auto params = g.make_params<float>(1);
  auto run = g.executor<float>(params, {.threads = 1});
  const auto message = test::message_of([&] {
    distributed::data_parallel<float> dp(world(), run, params,
                                         {.config = {{"data seed", std::to_string(1 + world().rank())}}});
  });
  CHECK(message ==
        "the ranks were started with different configurations:\n"
        "  - rank 1: \"setting data seed\" is \"2\", rank 0 has \"1\"");
}

TEST_CASE("a rank with a different model is refused at start") {
  std::string message;
  if (world().rank() == 0) {
    auto g = make_graph(chosen_gradient_loss());
    auto params = g.make_params<float>(1);
    auto run = g.executor<float>(params, {.threads = 1});
    message = test::message_of([&] { distributed::data_parallel<float> dp(world(), run, params); });
  } else {
    auto c = input<"c", shape<fix<12>>>();
    auto g = make_graph(sum(mul(c, param<"p", shape<fix<12>>>())));
    auto params = g.make_params<float>(1);
    auto run = g.executor<float>(params, {.threads = 1});
    message = test::message_of([&] { distributed::data_parallel<float> dp(world(), run, params); });
  }
  CHECK_THAT(message, Contains("rank 1: \"parameter p\" is \"[12]\", rank 0 has \"[11]\""));
  CHECK_THAT(message, Contains("rank 1: \"loom model\""));
}

TEST_CASE("sharding needs a packed store, and a layout change after sharding is refused") {
  auto g = make_graph(chosen_gradient_loss());
  param_store<float> params;  // built with set(): each parameter in a block of its own
  params.set("p", tensor<float>({11}));
  auto run = g.executor<float>(params, {.threads = 1});
  distributed::data_parallel<float> dp(world(), run, params);
  sgd<float> opt(params, 0.1);
  CHECK_THAT(test::message_of([&] { dp.shard_optimizer(opt); }), Contains("the parameter store is not packed"));
  params.pack();
  dp.shard_optimizer(opt);
  dp.after_update();  // nothing changed: the values are gathered
  params.set("p", tensor<float>({11}));  // the same shape: written in place, no layout change
  dp.after_update();
  params.pack();  // already packed: nothing moves
  dp.after_update();
  params.set("q", tensor<float>({2}));  // a new name: the layout changed on every rank
  CHECK_THAT(test::message_of([&] { dp.after_update(); }), Contains("layout changed after shard_optimizer"));
}

TEST_CASE("parameters that drift apart are caught by their checksums") {
  auto params = fresh(1);
  distributed::broadcast_parameters(world(), params);
  CHECK_NOTHROW(distributed::check_same_state(world(), params));
  if (world().rank() == 1) params.value("generator.weight")[3] += 1e-6f;
  CHECK(test::message_of([&] { distributed::check_same_state(world(), params); }) ==
        "the ranks hold different parameters: rank(s) 1 differ from rank 0 (checksums of every value's bits)");
}

TEST_CASE("a checkpoint rank 0 cannot write fails on every rank") {
  setup s;
  auto params = fresh(1);
  auto opt = make_optimizer(params, s);
  const auto message = test::message_of(
      [&] { distributed::save_checkpoint(world(), "/nonexistent-loom-dir/ckpt.safetensors", params, *opt); });
  CHECK_THAT(message, Contains("/nonexistent-loom-dir/ckpt.safetensors"));
  if (world().rank() != 0) CHECK_THAT(message, Catch::Matchers::StartsWith("rank 0 failed: "));
}
