// Shapes as types, and the errors a run can see: every message names what is wrong.
#include <catch2/catch.hpp>
#include <limits>
#include <vector>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;
using test::message_of;

// ---- compile-time facts (a failure here is a compile error) ----
static_assert(std::is_same_v<add_dims_t<fix<3>, fix<4>>, fix<7>>);
static_assert(std::is_same_v<add_dims_t<dyn<"T">, dyn<"P">>, add_dims_t<dyn<"P">, dyn<"T">>>,
              "dim sums are canonical: P + T is T + P");
static_assert(std::is_same_v<add_dims_t<dyn<"T">, fix<0>>, dyn<"T">>);
static_assert(std::is_same_v<typename decltype(matmul(input<"a", shape<dyn<"B">, fix<3>, fix<5>>>(),
                                                      input<"b", shape<fix<5>, fix<7>>>()))::shape,
                             shape<dyn<"B">, fix<3>, fix<7>>>,
              "matmul with a shared right operand keeps the batch dims");
static_assert(std::is_same_v<typename decltype(concat<2>(input<"c", shape<fix<1>, fix<2>, dyn<"P">, fix<4>>>(),
                                                         input<"n", shape<fix<1>, fix<2>, dyn<"T">, fix<4>>>()))::shape,
                             shape<fix<1>, fix<2>, add_dims_t<dyn<"P">, dyn<"T">>, fix<4>>>,
              "concat along time adds the dims");
static_assert(reshape_preserves_size<shape<dyn<"B">, fix<6>>, shape<dyn<"B">, fix<2>, fix<3>>>);
static_assert(!reshape_preserves_size<shape<dyn<"B">, fix<6>>, shape<dyn<"T">, fix<6>>>);
static_assert(is_permutation<3, 2, 0, 1> && !is_permutation<3, 0, 0, 1>);

TEST_CASE("the same op on the same inputs is one node") {
  auto x = input<"x", shape<dyn<"T">, fix<4>>>();
  auto a = softmax(x);
  auto b = softmax(x);
  static_assert(std::is_same_v<decltype(a), decltype(b)>);
  auto g = make_graph(add(a, b));
  CHECK(g.size() == 3);  // x, softmax, add
}

namespace {
auto two_inputs_graph() {
  auto x = input<"x", shape<dyn<"T">, fix<4>>>();
  auto m = input<"m", shape<dyn<"T">, fix<4>>>();
  return make_graph(add(x, m));
}
}  // namespace

TEST_CASE("a symbol bound to two values throws shape_error naming the symbol and both values") {
  auto g = two_inputs_graph();
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> x({7, 4}), m({9, 4});
  CHECK_THROWS_AS(run.forward({{"x", x}, {"m", m}}), shape_error);
  auto msg = message_of([&] { run.forward({{"x", x}, {"m", m}}); });
  CHECK_THAT(msg, Catch::Contains("\"T\"") && Catch::Contains("7") && Catch::Contains("9") &&
                      Catch::Contains("input \"x\"") && Catch::Contains("input \"m\""));
}

TEST_CASE("a tensor of the wrong rank throws shape_error with the expected shape") {
  auto g = two_inputs_graph();
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> x({7, 4, 1}), m({7, 4});
  auto msg = message_of([&] { run.forward({{"x", x}, {"m", m}}); });
  CHECK_THAT(msg, Catch::Contains("input \"x\"") && Catch::Contains("rank 2") && Catch::Contains("[T, 4]") &&
                      Catch::Contains("[7, 4, 1]"));
}

TEST_CASE("a fixed dim of the wrong size throws shape_error naming the axis") {
  auto g = two_inputs_graph();
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> x({7, 5}), m({7, 4});
  CHECK_THROWS_AS(run.forward({{"x", x}, {"m", m}}), shape_error);
  auto msg = message_of([&] { run.forward({{"x", x}, {"m", m}}); });
  CHECK_THAT(msg, Catch::Contains("input \"x\" axis 1 must be 4, got 5"));
}

TEST_CASE("a missing input throws missing_error naming it") {
  auto g = two_inputs_graph();
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> x({7, 4});
  CHECK_THROWS_AS(run.forward({{"x", x}}), missing_error);
  CHECK_THAT(message_of([&] { run.forward({{"x", x}}); }), Catch::Contains("missing input(s) \"m\""));
}

TEST_CASE("an unknown input name throws missing_error listing the graph's inputs") {
  auto g = two_inputs_graph();
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> x({7, 4});
  auto msg = message_of([&] { run.forward({{"x", x}, {"m", x}, {"mask", x}}); });
  CHECK_THAT(msg, Catch::Contains("\"mask\" is not an input") && Catch::Contains("\"x\", \"m\""));
}

TEST_CASE("an input of the wrong element type throws shape_error") {
  auto g = two_inputs_graph();
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<double> x({7, 4});
  tensor<float> m({7, 4});
  CHECK_THAT(message_of([&] { run.forward({{"x", x}, {"m", m}}); }),
             Catch::Contains("input \"x\" must be a tensor of float, got double"));
}

TEST_CASE("a missing parameter throws missing_error naming it and its shape") {
  auto x = input<"x", shape<dyn<"T">, fix<4>>>();
  auto y = matmul<false, true>(x, param<"proj.weight", shape<fix<3>, fix<4>>>());
  auto g = make_graph(y);
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> xs({2, 4});
  CHECK_THROWS_AS(run.forward({{"x", xs}}), missing_error);
  CHECK_THAT(message_of([&] { run.forward({{"x", xs}}); }), Catch::Contains("\"proj.weight\" [3, 4]"));
}

TEST_CASE("a parameter of the wrong shape throws shape_error with both shapes") {
  auto x = input<"x", shape<dyn<"T">, fix<4>>>();
  auto g = make_graph(matmul<false, true>(x, param<"w", shape<fix<3>, fix<4>>>()));
  param_store<float> p;
  p.set("w", tensor<float>({4, 3}));
  auto run = g.executor<float>(p);
  tensor<float> xs({2, 4});
  CHECK_THAT(message_of([&] { run.forward({{"x", xs}}); }),
             Catch::Contains("parameter \"w\" must have shape [3, 4], the store holds [4, 3]"));
}

TEST_CASE("a slice past the end of a dynamic axis throws shape_error") {
  auto x = input<"x", shape<dyn<"T">, fix<2>>>();
  auto g = make_graph(slice<0, fix<1>, fix<3>>(x));
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> ok({4, 2}), too_short({3, 2});
  CHECK_NOTHROW(run.forward({{"x", ok}}));
  CHECK_THROWS_AS(run.forward({{"x", too_short}}), shape_error);
}

TEST_CASE("a padding length outside [0, S] throws value_error") {
  auto s = input<"s", shape<dyn<"B">, dyn<"T">, dyn<"S">>>();
  auto len = input<"len", shape<dyn<"B">>, int>();
  auto g = make_graph(mask_padding(s, len));
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> scores({2, 3, 4});
  tensor<std::int32_t> bad({2}, {4, 5});
  CHECK_THROWS_AS(run.forward({{"s", scores}, {"len", bad}}), value_error);
}

TEST_CASE("a failed forward leaves the previous results intact") {
  auto x = input<"x", shape<dyn<"T">, fix<2>>>();
  auto g = make_graph(scale<2.0>(x));
  param_store<float> p;
  auto run = g.executor<float>(p);
  tensor<float> good({1, 2}, {1, 2}), bad({1, 3});
  run.forward({{"x", good}});
  CHECK_THROWS(run.forward({{"x", bad}}));
  CHECK(run.output()[1] == 4.0f);
  CHECK(run.bound("T") == 1);
}

TEST_CASE("tensors check their sizes and indices") {
  CHECK_THROWS_AS(tensor<float>({2, 3}, {1, 2, 3}), shape_error);
  tensor<float> t({2, 3});
  CHECK_THROWS_AS(t.at({2, 0}), shape_error);
  CHECK_THROWS_AS(t.at({0}), shape_error);
  t.at({1, 2}) = 5;
  CHECK(t[5] == 5);
}

TEST_CASE("executor dims gives each node's bound shape, and says when it cannot") {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<3>>>();
  auto y = named<"y">(concat<1>(x, x));  // [B, 2·T, 3]: a dim of two terms
  auto g = make_graph(y);
  param_store<float> p;
  auto run = g.executor<float>(p);
  const int xi = run.plan().input_index("x"), yi = run.plan().roots[0];
  CHECK_THROWS_AS(run.dims(xi), error);  // nothing bound yet
  tensor<float> t({2, 5, 3});
  run.forward({{"x", t}});
  CHECK(run.dims(xi) == dims_t{2, 5, 3});
  CHECK(run.dims(yi) == dims_t{2, 10, 3});
  CHECK(run.dims(yi) == run.output().dims);
  CHECK_THROWS_AS(run.dims(-1), error);
  CHECK_THROWS_AS(run.dims(run.plan().size()), error);
}

TEST_CASE("a plan dim's value is its constant plus its symbols' values, or nothing on overflow") {
  plan_dim d;
  d.constant = 3;
  d.n_syms = 2;
  d.sym = {1, 1};  // 3 + 2·s1
  const std::vector<std::int64_t> values{100, 7};
  CHECK(d.value(values) == 17);
  const std::vector<std::int64_t> huge{0, std::numeric_limits<std::int64_t>::max() / 2 + 1};
  CHECK_FALSE(d.value(huge).has_value());
}
