// The attention masks (mask.hpp): mask_causal with its S − T offset, mask_padding, mask_bool.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

TEST_CASE("the causal mask is offset by S - T for cached decoding") {
  auto x = input<"x", shape<dyn<"T">, dyn<"S">>>();
  auto g = make_graph(mask_causal(x));
  param_store<double> p;
  auto run = g.executor<double>(p);
  tensor<double> xs({2, 4});  // T = 2 new queries after P = 2 cached keys
  run.forward({{"x", xs}});
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> expect{0, 0, 0, -inf, 0, 0, 0, 0};  // query 0 at position 2 sees keys 0..2
  for (int i = 0; i < 8; ++i) CHECK(run.output()[i] == expect[static_cast<std::size_t>(i)]);
}

TEST_CASE("masks pass gradcheck through softmax: causal, padding, boolean, S != T, batch and heads") {
  param_store<double> p;
  SECTION("causal, square") {
    auto x = input<"x", shape<fix<2>, fix<2>, fix<4>, fix<4>>>();
    test::require_gradcheck(make_graph(softmax(mask_causal(x))), p, {{"x", test::random_tensor<double>({2, 2, 4, 4}, 1)}});
  }
  SECTION("causal, one decode row (T = 1, offset S - 1)") {
    auto x = input<"x", shape<fix<2>, fix<1>, fix<5>>>();
    test::require_gradcheck(make_graph(softmax(mask_causal(x))), p, {{"x", test::random_tensor<double>({2, 1, 5}, 2)}});
  }
  SECTION("padding, B = 3, S != T") {
    auto x = input<"x", shape<fix<3>, fix<2>, fix<3>, fix<5>>>();
    auto len = input<"len", shape<fix<3>>, int>();
    tensor<std::int32_t> lens({3}, {5, 2, 0});
    test::require_gradcheck(make_graph(softmax(mask_padding(x, len))), p,
                            {{"x", test::random_tensor<double>({3, 2, 3, 5}, 3)}, {"len", lens}});
  }
  SECTION("boolean, broadcast over batch and heads") {
    auto x = input<"x", shape<fix<2>, fix<2>, fix<3>, fix<4>>>();
    auto m = input<"m", shape<fix<2>, fix<1>, fix<3>, fix<4>>, bool>();
    tensor<std::uint8_t> ms({2, 1, 3, 4}, {1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0});
    test::require_gradcheck(make_graph(softmax(mask_bool(x, m))), p,
                            {{"x", test::random_tensor<double>({2, 2, 3, 4}, 4)}, {"m", ms}});
  }
}

TEST_CASE("padding and boolean masks hide exactly the keys they name") {
  const double inf = std::numeric_limits<double>::infinity();
  SECTION("padding") {
    auto x = input<"x", shape<fix<2>, fix<1>, fix<3>>>();
    auto len = input<"len", shape<fix<2>>, int>();
    auto g = make_graph(mask_padding(x, len));
    param_store<double> p;
    auto run = g.executor<double>(p);
    tensor<double> xs({2, 1, 3}, {1, 2, 3, 4, 5, 6});
    tensor<std::int32_t> lens({2}, {1, 3});
    run.forward({{"x", xs}, {"len", lens}});
    std::vector<double> expect{1, -inf, -inf, 4, 5, 6};
    for (int i = 0; i < 6; ++i) CHECK(run.output()[i] == expect[static_cast<std::size_t>(i)]);
  }
  SECTION("boolean (true may attend)") {
    auto x = input<"x", shape<fix<2>, fix<2>>>();
    auto m = input<"m", shape<fix<1>, fix<2>>, bool>();
    auto g = make_graph(mask_bool(x, m));
    param_store<double> p;
    auto run = g.executor<double>(p);
    tensor<double> xs({2, 2}, {1, 2, 3, 4});
    tensor<std::uint8_t> ms({1, 2}, {0, 1});
    run.forward({{"x", xs}, {"m", ms}});
    std::vector<double> expect{-inf, 2, -inf, 4};
    for (int i = 0; i < 4; ++i) CHECK(run.output()[i] == expect[static_cast<std::size_t>(i)]);
  }
}
