// embedding: one table row per token id, its backward, bad ids, and int64 ids (PyTorch's
// default) converted on the way in.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using Catch::Matchers::Contains;
using namespace op_test;
using namespace op_test::decimals;

TEST_CASE("embedding looks up one table row per token, for any leading dims") {
  auto tok = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
  auto w = param<"emb.weight", shape<fix<4>, fix<2>>>();
  auto g = make_graph(embedding(tok, w));
  static_assert(std::is_same_v<decltype(embedding(tok, w))::shape, shape<dyn<"B">, dyn<"T">, fix<2>>>);
  param_store<double> p;
  p.set("emb.weight", tensor<double>({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31}));
  auto run = g.executor<double>(p);
  tokens_t ts({2, 3}, {2, 0, 2, 1, 3, 0});
  run.forward({{"tok", ts}});
  REQUIRE(run.output().dims == dims_t{2, 3, 2});
  check_values(run.output(), {20, 21, 0, 1, 20, 21, 10, 11, 30, 31, 0, 1}, 0);
}

TEST_CASE("embedding's backward adds the rows of a repeated token into its table row") {
  auto tok = input<"tok", shape<fix<4>>, int>();
  auto w = param<"emb.weight", shape<fix<4>, fix<2>>>();
  auto g = make_graph(embedding(tok, w));
  param_store<double> p;
  p.set("emb.weight", tensor<double>({4, 2}));
  auto run = g.executor<double>(p);
  tokens_t ts({4}, {1, 3, 1, 1});
  run.forward({{"tok", ts}});
  std::vector<tensor<double>> dy{tensor<double>({4, 2}, {1, 2, 10, 20, 100, 200, 1000, 2000})};
  run.backward(dy);
  // row 1 = dy[0] + dy[2] + dy[3], row 3 = dy[1], rows 0 and 2 untouched
  check_values(p.grad("emb.weight"), {0, 0, 1101, 2202, 0, 0, 10, 20}, 0);
}

TEST_CASE("embedding passes gradcheck for batched, dynamic-length and one-axis tokens") {
  param_store<double> p;
  p.set("emb.weight", test::random_tensor<double>({5, 3}, 1));
  auto w = param<"emb.weight", shape<fix<5>, fix<3>>>();
  SECTION("tokens [B, T] with B = 2, repeated ids") {
    auto tok = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
    tokens_t ts({2, 3}, {4, 0, 4, 4, 2, 1});
    test::require_gradcheck(make_graph(embedding(tok, w)), p, {{"tok", ts}});
  }
  SECTION("tokens [T]") {
    auto tok = input<"tok", shape<dyn<"T">>, int>();
    tokens_t ts({5}, {3, 3, 0, 1, 3});
    test::require_gradcheck(make_graph(embedding(tok, w)), p, {{"tok", ts}});
  }
  SECTION("tokens [2, 2, 2] fixed") {
    auto tok = input<"tok", shape<fix<2>, fix<2>, fix<2>>, int>();
    tokens_t ts({2, 2, 2}, {0, 1, 2, 3, 4, 0, 0, 1});
    test::require_gradcheck(make_graph(embedding(tok, w)), p, {{"tok", ts}});
  }
}

TEST_CASE("a token id below 0 or at least V throws value_error naming its position and value") {
  auto tok = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
  auto w = param<"emb.weight", shape<fix<4>, fix<2>>>();
  auto g = make_graph(embedding(tok, w));
  param_store<double> p;
  p.set("emb.weight", tensor<double>({4, 2}));
  auto run = g.executor<double>(p);
  tokens_t too_big({2, 3}, {0, 1, 2, 3, 0, 7});
  CHECK_THROWS_AS(run.forward({{"tok", too_big}}), value_error);
  CHECK_THROWS_WITH(run.forward({{"tok", too_big}}), Contains("token id 7 at position [1, 2]") && Contains("[0, 4)"));
  tokens_t negative({2, 3}, {0, -1, 2, 3, 0, 1});
  CHECK_THROWS_WITH(run.forward({{"tok", negative}}), Contains("token id -1 at position [0, 1]"));
}

TEST_CASE("int64 token ids and lengths (PyTorch's default) are accepted where int32 ones are, and checked") {
  auto tok = input<"tok", shape<dyn<"B">, dyn<"T">>, std::int64_t>();  // the same input as with int
  auto len = input<"len", shape<dyn<"B">>, int>();
  auto w = param<"emb.weight", shape<fix<5>, fix<4>>>();
  auto e = embedding(tok, w);                                            // [B, T, 4]
  auto g = make_graph(softmax(mask_padding(matmul<false, true>(e, e), len)));
  auto p = g.make_params<double>(1);
  auto run32 = g.executor<double>(p), run64 = g.executor<double>(p);
  run32.forward({{"tok", tokens_t({2, 3}, {4, 1, 0, 2, 2, 3})}, {"len", tokens_t({2}, {3, 2})}});
  tensor<std::int64_t> ids({2, 3}, {4, 1, 0, 2, 2, 3}), lens({2}, {3, 2});
  run64.forward({{"tok", ids}, {"len", lens}});
  CHECK(test::same_bits(tensor<double>(run32.output()), tensor<double>(run64.output())));
  // a value past int32 names itself and its position; one inside int32 but past V is embedding's
  tensor<std::int64_t> huge({2, 3}, {4, 1, 0, 2, 5'000'000'000, 3});
  CHECK_THROWS_AS(run64.forward({{"tok", huge}, {"len", lens}}), value_error);
  CHECK_THROWS_WITH(run64.forward({{"tok", huge}, {"len", lens}}),
                    Contains("feed \"tok\"") && Contains("5000000000 at [1, 1]") && Contains("int32"));
  tensor<std::int64_t> past_v({2, 3}, {4, 1, 0, 2, 9, 3});
  CHECK_THROWS_WITH(run64.forward({{"tok", past_v}, {"len", lens}}), Contains("token id 9 at position [1, 1]"));
  test::require_gradcheck(g, p, {{"tok", ids}, {"len", lens}});
}
