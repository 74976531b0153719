// The pointwise helper (pointwise.hpp): a user's op from f and df gets its kernels and traits.
#include <catch2/catch.hpp>

#include <cmath>
#include <string_view>
#include <type_traits>
#include <vector>

#include "loom/loom.hpp"
#include "op_test_support.hpp"
#include "test_support.hpp"

using namespace loom;
using namespace op_test;
using namespace op_test::closed_forms;

namespace {

/// softsign(x) = x / (1 + |x|), a user's pointwise op made with the public helper.
struct softsign_op : pointwise<softsign_op> {
  static constexpr std::string_view name = "softsign";
  template <class T>
  static T f(T x) {
    return x / (1 + std::abs(x));
  }
  template <class T>
  static T df(T x, T /*y*/) {
    return 1 / ((1 + std::abs(x)) * (1 + std::abs(x)));
  }
};
inline constexpr op_fn<softsign_op> softsign{};

}  // namespace

TEMPLATE_TEST_CASE("a user's pointwise op gets its forward, backward and traits from f and df", "", float, double) {
  using T = TestType;
  auto x = input<"x", shape<fix<3>>>();
  // softsign(x) = x / (1 + |x|): 1 → 1/2, −3 → −3/4, 0 → 0
  const auto y = run_on(make_graph(softsign(x)), tensor<T>({3}, {1, -3, 0}));
  CHECK(y[0] == near<T>(0.5));
  CHECK(y[1] == near<T>(-0.75));
  CHECK(y[2] == near<T>(0));
  static_assert(entry_of<softsign_op>.writes_fresh && entry_of<softsign_op>.backward_in_place);
  static_assert(entry_of<softsign_op>.backward_reads_input(0) && !entry_of<softsign_op>.backward_reads_output);
  static_assert(!entry_of<exp_op>.backward_reads_input(0) && entry_of<exp_op>.backward_reads_output);
  static_assert(entry_of<neg_op>.backward_reads == 0 && !entry_of<neg_op>.backward_reads_output);
  if constexpr (std::is_same_v<T, double>) {
    param_store<double> p;
    test::require_gradcheck(make_graph(softsign(x)), p, {{"x", tensor<double>({3}, {1, -3, 0.25})}});
  }
}
