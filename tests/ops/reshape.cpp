// reshape and transpose (reshape.hpp): splitting attention heads.
#include <catch2/catch.hpp>

#include <vector>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

TEST_CASE("reshape and transpose split heads as expected and pass gradcheck") {
  // [B=1, T=2, D=4] -> [1, 2, H=2, 2] -> [1, H, T, 2]
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<4>>>();
  auto heads = transpose<0, 2, 1, 3>(reshape<shape<dyn<"B">, dyn<"T">, fix<2>, fix<2>>>(x));
  auto g = make_graph(heads);
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({1, 2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  run.forward({{"x", xs}});
  // head 0 holds features 0,1 of each step; head 1 features 2,3
  std::vector<double> expect{0, 1, 4, 5, 2, 3, 6, 7};
  for (int i = 0; i < 8; ++i) CHECK(run.output()[i] == expect[static_cast<std::size_t>(i)]);
  test::require_gradcheck(g, p, {{"x", test::random_tensor<double>({2, 3, 4}, 6)}});
  auto y = input<"y", shape<fix<2>, fix<3>, fix<4>>>();
  test::require_gradcheck(make_graph(transpose<2, 0, 1>(y)), p, {{"y", test::random_tensor<double>({2, 3, 4}, 7)}});
}
