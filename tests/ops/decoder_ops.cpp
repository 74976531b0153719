// rms_norm, rope and gelu_tanh together (a decoder's ops): the same bits for any thread count,
// and in place as with separate buffers.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::double_reference;

using test::same_bits;

TEST_CASE("rms_norm, rope and gelu_tanh give the same bits for 1, 2 and 4 threads") {
  // large enough that every kernel splits into several chunks
  auto x = input<"x", shape<dyn<"B">, fix<4>, dyn<"T">, fix<64>>>();
  auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
  auto w = param<"w", shape<fix<64>>>();
  auto y = gelu_tanh(rms_norm<1e-6>(rope<rope_layout::rotate_half>(x, pos), w)) * x;
  auto g = make_graph(sum(rope<rope_layout::interleaved>(y, pos)));
  const auto xs = test::random_tensor<float>({4, 4, 500, 64}, 19);
  const tokens_t ps = positions_from({0, 3, 100, 4000}, 500);
  auto run = [&](int threads) {
    param_store<float> p;
    p.set("w", test::random_tensor<float>({64}, 20, -2, 2));
    auto ex = g.executor<float>(p, {.threads = threads, .input_grads = true});
    ex.forward({{"x", xs}, {"pos", ps}});
    ex.backward();
    std::vector<float> all{ex.output()[0]};
    const auto dx = ex.input_grad("x");
    all.insert(all.end(), dx.data, dx.data + dx.size());
    for (auto& [name, entry] : p) all.insert(all.end(), entry.grad.values().begin(), entry.grad.values().end());
    return all;
  };
  const auto one = run(1);
  CHECK(same_bits(one, run(2)));
  CHECK(same_bits(one, run(4)));
}

TEST_CASE("rope, gelu_tanh and rms_norm running in place give the same bits as with separate buffers") {
  auto x = input<"x", shape<dyn<"B">, fix<2>, dyn<"T">, fix<6>>>();
  auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
  auto w = param<"w", shape<fix<6>>>();
  const auto xs = test::random_tensor<double>({3, 2, 4, 6}, 21);
  const tokens_t ps = positions_from({0, 9, 2}, 4);
  auto run = [&](auto g, exec_options o) {
    param_store<double> p;
    p.set("w", test::random_tensor<double>({6}, 22, -2, 2));
    auto ex = g.template executor<double>(p, o);
    ex.forward({{"x", xs}, {"pos", ps}});
    std::vector<double> r = doubles(ex.output());
    if (o.inference) return r;
    ex.backward();
    const auto dx = ex.input_grad("x");
    r.insert(r.end(), dx.data, dx.data + dx.size());
    r.insert(r.end(), p.grad("w").values().begin(), p.grad("w").values().end());
    return r;
  };
  SECTION("training: rope over scale's buffer, and each backward over its output's gradient") {
    auto g = make_graph(sum(mul(gelu_tanh(rope<rope_layout::interleaved>(scale<1.5>(x), pos)), w)));
    CHECK(same_bits(run(g, {.input_grads = true, .keep_all = true}), run(g, {.input_grads = true})));
    const auto plan = g.memory_plan<double>({{"B", 3}, {"T", 4}}, {.input_grads = true});
    INFO(plan.str(-1));
    CHECK(plan.in_place >= 1);  // rope's value in scale's buffer (the gradients' merges are not counted)
  }
  SECTION("inference: rms_norm and gelu_tanh over their inputs' buffers") {
    auto g = make_graph(gelu_tanh(rms_norm<1e-6>(rope<rope_layout::rotate_half>(scale<1.5>(x), pos), w)));
    CHECK(same_bits(run(g, {.inference = true, .keep_all = true}), run(g, {.inference = true})));
    const auto plan = g.memory_plan<double>({{"B", 3}, {"T", 4}}, {.inference = true});
    INFO(plan.str(-1));
    CHECK(plan.in_place >= 2);
  }
}
