#include <cstdio>

#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "loom/nn/linear.hpp"

using namespace loom;

int main() {
  auto x = input<"x", shape<dyn<"T">, fix<4>>>();  // T: a named dim, bound at run time
  auto q = nn::linear<"q", 2, false>(x);           // x Wᵀ, W = param "q.weight" [2, 4] -> [T, 2]
  auto k = nn::linear<"k", 2, false>(x);           // [T, 2]
  auto v = nn::linear<"v", 2, false>(x);           // [T, 2]
  auto out = nn::attention(q, k, v, nn::causal);   // softmax(mask(q kᵀ / √2)) v: [T, 2]
  auto g = make_graph(sum(out));                   // the plan, computed at compile time
  // matmul(x, x) would not compile: the static_assert names matmul and the dims 4 and T.

  auto params = g.make_params<float>(/*seed=*/1);  // q.weight, k.weight, v.weight as nn.Linear
  auto run = g.executor<float>(params);            // runs on oneTBB
  tensor<float> xs({3, 4}, {0.8, 0.2, 0.4, 0.1, 0.1, 0.9, 0.3, 0.7, 0.3, 0.1, 0.9, 0.2});
  run.forward({{"x", xs}});                        // binds T = 3
  run.backward();                                  // gradients land in params.grad("v.weight"), ...
  std::printf("loss %.4f, d loss / d v.weight[0] %.4f\n", run.output()[0], params.grad("v.weight")[0]);

  auto params64 = g.make_params<double>(1);        // every gradient vs central differences
  std::printf("%s\n", gradcheck(g, params64, {{"x", tensor_cast<double>(xs)}}).str().c_str());
}
