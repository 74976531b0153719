// Uses an installed loom as a user's project would, and exits non-zero when something is wrong:
//   1. a three-node graph, x [T, 4] -> softmax(x) [T, 4] -> sum [], against values worked by hand;
//   2. an op of this project's own (softsign), declared against the installed kernel interface:
//      its gradients checked in double, then a tiny classifier that uses it trained for some steps;
//   3. an op whose kernels this project compiles once, in own_ops.cpp (cube, own_ops.hpp): its
//      values and input gradient against numbers worked by hand, its gradients checked in double.
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "loom/core/kernel.hpp"    // op_args, with_fresh, put
#include "loom/core/parallel.hpp"  // for_chunks
#include "loom/loom.hpp"
#include "loom/nn/linear.hpp"
#include "own_ops.hpp"

namespace consumer {

// softsign: y = x / (1 + |x|), elementwise;  backward: dx (+)= dy / (1 + |x|)².
struct softsign_op : loom::op_def<softsign_op> {
  static constexpr std::string_view name = "consumer.softsign";
  static constexpr loom::op_traits traits{
      .writes_fresh = true, .can_run_in_place = true, .backward_reads = loom::reads({0})};
  template <class S>
  struct rule {
    using type = S;
  };
  template <class T>
  static void forward(const loom::op_args<T>& a) {
    const T* x = a.input(0);
    loom::for_chunks(a.out_dims.size(), 1 << 14, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) a.out[i] = x[i] / (1 + std::abs(x[i]));
    });
  }
  template <class T>
  static void backward(const loom::op_args<T>& a) {
    T* dx = a.grad(0);
    if (!dx) return;
    const T* x = a.input(0);
    loom::with_fresh(a.fresh(0), [&](auto fresh) {
      loom::for_chunks(a.out_dims.size(), 1 << 14, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          const T s = 1 + std::abs(x[i]);
          loom::put<fresh()>(dx[i], a.dout[i] / (s * s));
        }
      });
    });
  }
};
inline constexpr loom::op_fn<softsign_op> softsign{};

}  // namespace consumer

namespace {

// sum(softmax(x)) is T whatever x is, and its gradient is zero.
bool softmax_sums_by_hand() {
  auto x = loom::input<"x", loom::shape<loom::dyn<"T">, loom::fix<4>>>();
  auto weights = loom::softmax(x);
  auto total = loom::sum(weights);
  auto g = loom::make_graph(total);

  loom::param_store<double> params;  // the graph has none
  auto run = g.executor<double>(params, {.input_grads = true});
  run.keep(weights);  // intermediate values are readable only when kept (their memory is reused)
  // Row 0: softmax of [0, 0, 0, ln 5] is [1, 1, 1, 5] / 8. Row 1: uniform, 1/4 each.
  loom::tensor<double> xs({2, 4}, {0, 0, 0, std::log(5.0), 7, 7, 7, 7});
  run.forward({{"x", xs}});
  run.backward();

  const double expected_weights[8] = {0.125, 0.125, 0.125, 0.625, 0.25, 0.25, 0.25, 0.25};
  bool ok = g.size() == 3 && std::fabs(run.output()[0] - 2.0) < 1e-12;
  for (int i = 0; i < 8; ++i) {
    ok = ok && std::fabs(run.value(weights)[i] - expected_weights[i]) < 1e-12;
    ok = ok && std::fabs(run.input_grad("x")[i]) < 1e-12;
  }
  std::printf("%d nodes, sum(softmax(x)) = %.15g (expected 2): %s\n", g.size(), run.output()[0], ok ? "ok" : "WRONG");
  return ok;
}

// Two classes of points x [N, 4]: whether x0 + x1 > 0.
//   x -> linear [N, 8] -> softsign -> linear [N, 2] -> cross_entropy with label [N]
auto classifier_loss() {
  auto x = loom::input<"x", loom::shape<loom::dyn<"N">, loom::fix<4>>>();
  auto label = loom::input<"label", loom::shape<loom::dyn<"N">>, int>();
  auto hidden = consumer::softsign(loom::nn::linear<"hidden", 8>(x));
  return loom::cross_entropy(loom::nn::linear<"out", 2>(hidden), label);
}

bool own_op_checks_and_trains() {
  auto g = loom::make_graph(classifier_loss());
  constexpr std::int64_t n = 32;
  loom::tensor<float> x({n, 4});
  loom::tensor<int> label({n});
  loom::rng random(3);
  for (std::int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) x[i * 4 + j] = static_cast<float>(random.normal());
    label[i] = x[i * 4] + x[i * 4 + 1] > 0;
  }

  auto params64 = g.make_params<double>(1);
  const auto check = loom::gradcheck(g, params64, {{"x", loom::tensor_cast<double>(x)}, {"label", label}});
  std::printf("consumer.softsign in a classifier: %s\n", check.str().c_str());

  auto params = g.make_params<float>(1);
  auto run = g.executor<float>(params);
  loom::adam<float> opt(params, {.lr = 0.05});
  double first = 0, last = 0;
  for (int step = 1; step <= 60; ++step) {
    run.forward({{"x", x}, {"label", label}});
    run.backward();
    opt.step();
    last = run.output()[0];
    if (step == 1) first = last;
  }
  const bool learnt = last < 0.5 * first;
  std::printf("loss %.4f at step 1, %.4f at step 60: %s\n", first, last, learnt ? "ok" : "DID NOT FALL BY HALF");
  return check.ok && learnt;
}

// sum(cube(x)) for x = [1, -2, 0.5] is 1 - 8 + 0.125; its gradient is 3x² = [3, 12, 0.75].
bool compiled_op_by_hand_and_checked() {
  auto x = loom::input<"x", loom::shape<loom::fix<3>>>();
  auto g = loom::make_graph(loom::sum(consumer::cube(x)));
  loom::param_store<double> none;
  auto run = g.executor<double>(none, {.input_grads = true});
  run.forward({{"x", loom::tensor<double>({3}, {1, -2, 0.5})}});
  run.backward();
  const double dx[3] = {3, 12, 0.75};
  bool ok = run.output()[0] == -6.875;
  for (int i = 0; i < 3; ++i) ok = ok && run.input_grad("x")[i] == dx[i];

  auto h = loom::input<"h", loom::shape<loom::dyn<"N">, loom::fix<4>>>();
  auto model = loom::make_graph(loom::sum(consumer::cube(loom::nn::linear<"lin", 3>(h))));
  auto params = model.make_params<double>(5);
  loom::tensor<double> hs({2, 4}, {0.5, -1, 0.25, 2, -0.75, 1.5, 0.1, -0.3});
  const auto check = loom::gradcheck(model, params, {{"h", hs}});
  std::printf("consumer.cube (compiled in own_ops.cpp): sum = %.15g (expected -6.875), %s\n", run.output()[0],
              check.str().c_str());
  return ok && check.ok;
}

}  // namespace

int main() {
  const bool by_hand = softmax_sums_by_hand();
  const bool own_op = own_op_checks_and_trains();
  const bool compiled_op = compiled_op_by_hand_and_checked();
  return by_hand && own_op && compiled_op ? 0 : 1;
}
