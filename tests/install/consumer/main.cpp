// Builds and runs a three-node graph with an installed loom; exits non-zero on a wrong value.
//   x: [T, 4] -> softmax(x): [T, 4] -> sum: []
#include <cmath>
#include <cstdio>
#include <numbers>

#include "loom/loom.hpp"

int main() {
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

  // By hand: every row of a softmax sums to one, so the total is T = 2; and since the total
  // does not depend on x, its gradient is zero.
  const double expected_weights[8] = {0.125, 0.125, 0.125, 0.625, 0.25, 0.25, 0.25, 0.25};
  bool ok = g.size() == 3 && std::fabs(run.output()[0] - 2.0) < 1e-12;
  for (int i = 0; i < 8; ++i) {
    ok = ok && std::fabs(run.value(weights)[i] - expected_weights[i]) < 1e-12;
    ok = ok && std::fabs(run.input_grad("x")[i]) < 1e-12;
  }
  std::printf("%d nodes, sum(softmax(x)) = %.15g (expected 2): %s\n", g.size(), run.output()[0], ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
