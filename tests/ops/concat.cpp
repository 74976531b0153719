// concat, slice and split (concat.hpp): joining and cutting along one axis.
#include <catch2/catch.hpp>

#include <type_traits>
#include <vector>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

TEST_CASE("concat joins along heads and along time, and passes gradcheck") {
  param_store<double> p;
  SECTION("time (the KV cache: P + T)") {
    auto past = input<"past", shape<fix<1>, fix<2>, dyn<"P">, fix<3>>>();
    auto now = input<"now", shape<fix<1>, fix<2>, dyn<"T">, fix<3>>>();
    auto g = make_graph(concat<2>(past, now));
    auto run = g.executor<double>(p);
    auto ps = test::random_tensor<double>({1, 2, 2, 3}, 1);
    auto ns = test::random_tensor<double>({1, 2, 1, 3}, 2);
    run.forward({{"past", ps}, {"now", ns}});
    REQUIRE(run.output().dims == dims_t{1, 2, 3, 3});
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < 3; ++t)
        for (int d = 0; d < 3; ++d)
          CHECK(run.output().at({0, h, t, d}) == (t < 2 ? ps.at({0, h, t, d}) : ns.at({0, h, 0, d})));
    test::require_gradcheck(g, p, {{"past", ps}, {"now", ns}});
  }
  SECTION("heads, three operands, last axis") {
    auto a = input<"a", shape<fix<2>, fix<3>, fix<2>>>();
    auto b = input<"b", shape<fix<2>, fix<3>, fix<1>>>();
    auto c = input<"c", shape<fix<2>, fix<3>, fix<3>>>();
    auto g = make_graph(concat<-1>(a, b, c));
    static_assert(std::is_same_v<decltype(concat<-1>(a, b, c))::shape, shape<fix<2>, fix<3>, fix<6>>>);
    test::require_gradcheck(g, p,
                            {{"a", test::random_tensor<double>({2, 3, 2}, 1)},
                             {"b", test::random_tensor<double>({2, 3, 1}, 2)},
                             {"c", test::random_tensor<double>({2, 3, 3}, 3)}});
  }
}

TEST_CASE("slice and split cut an axis into parts and pass gradcheck") {
  auto x = input<"x", shape<fix<2>, fix<6>>>();
  auto [a, b, c] = split<-1, 3>(x);
  auto g = make_graph(b);
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({2, 6}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  run.forward({{"x", xs}});
  std::vector<double> expect{2, 3, 8, 9};
  for (int i = 0; i < 4; ++i) CHECK(run.output()[i] == expect[static_cast<std::size_t>(i)]);
  // all three parts recombined with different weights
  auto g2 = make_graph(add(add(scale<1.0>(a), scale<2.0>(b)), scale<3.0>(c)));
  test::require_gradcheck(g2, p, {{"x", test::random_tensor<double>({2, 6}, 4)}});
  // a slice along a dynamic axis
  auto y = input<"y", shape<dyn<"T">, fix<2>>>();
  auto g3 = make_graph(slice<0, fix<1>, fix<2>>(y));
  test::require_gradcheck(g3, p, {{"y", test::random_tensor<double>({4, 2}, 5)}});
}
