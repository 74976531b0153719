// The reductions over one axis (reduction.hpp): reduce_sum, mean, amax; shapes, values, ties,
// empty axes, gradcheck and the same bits for any thread count.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::closed_forms;

TEST_CASE("reductions remove their axis, or keep it as 1, negative axes counting from the end") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<4>>>();
  static_assert(std::is_same_v<decltype(reduce_sum<1>(x))::shape, shape<fix<2>, fix<4>>>);
  static_assert(std::is_same_v<decltype(reduce_sum<-2>(x))::shape, shape<fix<2>, fix<4>>>);
  static_assert(std::is_same_v<decltype(reduce_sum<0, true>(x))::shape, shape<fix<1>, dyn<"T">, fix<4>>>);
  static_assert(std::is_same_v<decltype(mean<-1, true>(x))::shape, shape<fix<2>, dyn<"T">, fix<1>>>);
  static_assert(std::is_same_v<decltype(mean<-1>(x))::shape, shape<fix<2>, dyn<"T">>>);
  static_assert(std::is_same_v<decltype(amax<2>(x))::shape, shape<fix<2>, dyn<"T">>>);
  static_assert(std::is_same_v<decltype(amax<-3, true>(x))::shape, shape<fix<1>, dyn<"T">, fix<4>>>);
  auto v = input<"v", shape<fix<5>>>();
  static_assert(std::is_same_v<decltype(reduce_sum<0>(v))::shape, shape<>>);
  SUCCEED();
}

TEMPLATE_TEST_CASE("reduce_sum, mean and amax over each axis of [2, 3] match sums worked out by hand", "", float,
                   double) {
  using T = TestType;
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  // x = [[1, 5, 3],
  //      [4, 2, 9]]
  const tensor<T> xs({2, 3}, {1, 5, 3, 4, 2, 9});
  auto check = [](const std::vector<T>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == near<T>(want[i]));
  };
  check(run_on(make_graph(reduce_sum<0>(x)), xs), {5, 7, 12});
  check(run_on(make_graph(reduce_sum<-1>(x)), xs), {9, 15});
  check(run_on(make_graph(reduce_sum<1, true>(x)), xs), {9, 15});
  check(run_on(make_graph(mean<0>(x)), xs), {2.5, 3.5, 6});
  check(run_on(make_graph(mean<1, true>(x)), xs), {3, 5});
  check(run_on(make_graph(amax<0>(x)), xs), {4, 5, 9});
  check(run_on(make_graph(amax<-1>(x)), xs), {5, 9});
}

TEST_CASE("reductions over a middle axis of [2, 3, 2] add along that axis only") {
  auto x = input<"x", shape<fix<2>, fix<3>, fix<2>>>();
  tensor<double> xs({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -12});
  // over axis 1: [1+3+5, 2+4+6], [7+9+11, 8+10−12]
  const auto s = run_on(make_graph(reduce_sum<1>(x)), xs);
  CHECK(s == std::vector<double>{9, 12, 27, 6});
  const auto m = run_on(make_graph(mean<-2, true>(x)), xs);
  CHECK(m == std::vector<double>{3, 4, 9, 2});
  const auto hi = run_on(make_graph(amax<1>(x)), xs);
  CHECK(hi == std::vector<double>{5, 6, 11, 10});
}

TEST_CASE("mean divides by the size of a named axis when the graph runs") {
  auto x = input<"x", shape<fix<2>, dyn<"T">>>();
  auto g = make_graph(mean<1>(x));
  CHECK(run_on(g, tensor<double>({2, 4}, {1, 2, 3, 6, 0, 0, 0, 8})) == std::vector<double>{3, 2});
  CHECK(run_on(g, tensor<double>({2, 1}, {7, -1})) == std::vector<double>{7, -1});
}

TEST_CASE("reductions pass gradcheck over every axis, with and without keepdim") {
  auto x = input<"x", shape<fix<2>, dyn<"T">, fix<3>>>();
  param_store<double> p;
  const auto xs = test::random_tensor<double>({2, 4, 3}, 10);  // no ties among 24 random values
  SECTION("reduce_sum") {
    test::require_gradcheck(make_graph(reduce_sum<0>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(reduce_sum<1, true>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(reduce_sum<-1>(x)), p, {{"x", xs}});
  }
  SECTION("mean") {
    test::require_gradcheck(make_graph(mean<0, true>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(mean<-2>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(mean<2>(x)), p, {{"x", xs}});
  }
  SECTION("amax") {
    test::require_gradcheck(make_graph(amax<0>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(amax<1, true>(x)), p, {{"x", xs}});
    test::require_gradcheck(make_graph(amax<-1>(x)), p, {{"x", xs}});
  }
}

TEST_CASE("amax shares the gradient evenly among tied maxima, as torch.amax") {
  auto x = input<"x", shape<fix<2>, fix<3>>>();
  param_store<double> p;
  auto ex = make_graph(sum(amax<-1>(x))).executor<double>(p, {.input_grads = true});
  ex.forward({{"x", tensor<double>({2, 3}, {1, 3, 3, 2, 2, 2})}});
  CHECK(ex.output()[0] == 3 + 2);
  ex.backward();
  check_values<double>(ex.input_grad("x"), {0, 0.5, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3});
}

TEST_CASE("amax over an axis of size 0 is refused when binding, naming the op and the axis") {
  auto x = input<"x", shape<fix<2>, dyn<"T">>>();
  param_store<double> p;
  auto ex = make_graph(amax<1>(x)).executor<double>(p);
  const tensor<double> empty(dims_t{2, 0});
  CHECK_THROWS_AS(ex.forward({{"x", empty}}), shape_error);
  CHECK_THAT(test::message_of([&] { ex.forward({{"x", empty}}); }),
             Catch::Contains("amax") && Catch::Contains("axis 1") && Catch::Contains("[2, 0]"));
}

TEST_CASE("a sum over an axis of size 0 is 0 and a mean NaN, as PyTorch, a batch of 0 gives an empty output") {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">>>();
  param_store<double> p;
  const tensor<double> no_steps(dims_t{2, 0}), no_batch(dims_t{0, 3});
  const auto s = run_on(make_graph(reduce_sum<1>(x)), no_steps);
  CHECK(s == std::vector<double>{0, 0});
  const auto m = run_on(make_graph(mean<1>(x)), no_steps);
  REQUIRE(m.size() == 2);
  CHECK(std::isnan(m[0]));
  CHECK(run_on(make_graph(amax<1>(x)), no_batch).empty());
  // backward through a batch of 0: an empty gradient, and the loss (a sum over nothing) 0
  auto ex = make_graph(sum(mean<-1>(x) * reduce_sum<1>(x))).executor<double>(p, {.input_grads = true});
  ex.forward({{"x", no_batch}});
  CHECK(ex.output()[0] == 0);
  ex.backward();
  CHECK(ex.input_grad("x").dims == dims_t{0, 3});
}

TEST_CASE("reductions give the same bits for any number of threads") {
  // large enough that each reduction splits into many chunks: over T (tiles of D), over D
  // (rows), over B (one long row of tiles)
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, dyn<"D">>>();
  const auto xs = test::random_tensor<float>({3, 4000, 300}, 11);
  auto run = [&](auto g, int threads) {
    param_store<float> p;
    auto ex = g.template executor<float>(p, {.threads = threads, .input_grads = true});
    ex.forward({{"x", xs}});
    const tensor<float> y(ex.output());
    ex.backward();
    return std::pair{y, tensor<float>(ex.input_grad("x"))};
  };
  auto same = [&](auto g) {
    const auto one = run(g, 1), two = run(g, 2);
    CHECK(test::same_bits(one.first, two.first));
    CHECK(test::same_bits(one.second, two.second));
  };
  same(make_graph(sum(reduce_sum<1>(x))));
  same(make_graph(sum(mean<-1>(x))));
  same(make_graph(sum(amax<0>(x))));
}
