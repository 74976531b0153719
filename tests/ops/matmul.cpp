// matmul: batched products with transposes and shared (broadcast) operands, against a naive
// product, and gradcheck for every layout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {
template <bool TA, bool TB, class SA, class SB>
void check_matmul(dims_t da, dims_t db) {
  auto a = input<"a", SA>();
  auto b = input<"b", SB>();
  auto g = make_graph(matmul<TA, TB>(a, b));
  param_store<double> p;
  auto as = test::random_tensor<double>(da, 11);
  auto bs = test::random_tensor<double>(db, 12);
  test::require_gradcheck(g, p, {{"a", as}, {"b", bs}});
}
// op(X) of one rank-2 slice as a plain row-major matrix
std::vector<double> op_of(const double* x, int rows, int cols, bool trans) {
  std::vector<double> r(static_cast<std::size_t>(rows * cols));
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      r[static_cast<std::size_t>(trans ? j * rows + i : i * cols + j)] = x[i * cols + j];
  return r;
}
}  // namespace

TEST_CASE("matmul computes batched products with transposes and shared operands") {
  // a [2, 3, 4] (TransA: stored [2, 4, 3]) · b [4, 5] shared
  auto a = input<"a", shape<fix<2>, fix<4>, fix<3>>>();
  auto b = input<"b", shape<fix<4>, fix<5>>>();
  auto g = make_graph(matmul<true, false>(a, b));
  param_store<double> p;
  auto run = g.executor<double>(p);
  auto as = test::random_tensor<double>({2, 4, 3}, 1);
  auto bs = test::random_tensor<double>({4, 5}, 2);
  run.forward({{"a", as}, {"b", bs}});
  auto c = run.output();
  REQUIRE(c.dims == dims_t{2, 3, 5});
  for (int batch = 0; batch < 2; ++batch) {
    auto a_op = op_of(as.data() + batch * 12, 4, 3, true);  // [3, 4]
    auto ref = test::naive_matmul(a_op.data(), bs.data(), 3, 4, 5);
    for (int e = 0; e < 15; ++e) CHECK(c[batch * 15 + e] == Approx(ref[static_cast<std::size_t>(e)]).epsilon(1e-12));
  }
}

TEST_CASE("matmul passes gradcheck for every layout") {
  SECTION("plain") { check_matmul<false, false, shape<fix<3>, fix<4>>, shape<fix<4>, fix<5>>>({3, 4}, {4, 5}); }
  SECTION("a transposed") { check_matmul<true, false, shape<fix<4>, fix<3>>, shape<fix<4>, fix<5>>>({4, 3}, {4, 5}); }
  SECTION("b transposed") { check_matmul<false, true, shape<fix<3>, fix<4>>, shape<fix<5>, fix<4>>>({3, 4}, {5, 4}); }
  SECTION("both transposed") { check_matmul<true, true, shape<fix<4>, fix<3>>, shape<fix<5>, fix<4>>>({4, 3}, {5, 4}); }
  SECTION("batched") {
    check_matmul<false, false, shape<fix<2>, fix<3>, fix<4>>, shape<fix<2>, fix<4>, fix<2>>>({2, 3, 4}, {2, 4, 2});
  }
  SECTION("batched, b transposed, 4-d") {
    check_matmul<false, true, shape<fix<2>, fix<2>, fix<3>, fix<4>>, shape<fix<2>, fix<2>, fix<5>, fix<4>>>(
        {2, 2, 3, 4}, {2, 2, 5, 4});
  }
  SECTION("b shared (a weight)") {
    check_matmul<false, false, shape<fix<2>, fix<3>, fix<4>>, shape<fix<4>, fix<2>>>({2, 3, 4}, {4, 2});
  }
  SECTION("b shared and transposed (nn.Linear)") {
    check_matmul<false, true, shape<fix<2>, fix<3>, fix<4>>, shape<fix<2>, fix<4>>>({2, 3, 4}, {2, 4});
  }
  SECTION("a transposed, b shared") {
    check_matmul<true, true, shape<fix<2>, fix<4>, fix<3>>, shape<fix<2>, fix<4>>>({2, 4, 3}, {2, 4});
  }
  SECTION("a shared") {
    check_matmul<false, false, shape<fix<3>, fix<4>>, shape<fix<2>, fix<4>, fix<2>>>({3, 4}, {2, 4, 2});
  }
  SECTION("a shared and transposed") {
    check_matmul<true, true, shape<fix<4>, fix<3>>, shape<fix<2>, fix<2>, fix<4>>>({4, 3}, {2, 2, 4});
  }
}

TEST_CASE("matmul splits large products into row chunks without changing the result") {
  // 300 rows × a shared weight: several row chunks; compare with the naive product
  auto a = input<"a", shape<dyn<"B">, dyn<"T">, fix<64>>>();
  auto b = input<"b", shape<fix<64>, fix<48>>>();
  auto g = make_graph(matmul(a, b));
  param_store<double> p;
  auto run = g.executor<double>(p, {.threads = 2});
  auto as = test::random_tensor<double>({3, 100, 64}, 5);
  auto bs = test::random_tensor<double>({64, 48}, 6);
  run.forward({{"a", as}, {"b", bs}});
  auto ref = test::naive_matmul(as.data(), bs.data(), 300, 64, 48);
  double worst = 0;
  for (std::size_t e = 0; e < ref.size(); ++e)
    worst = std::max(worst, std::abs(run.output()[static_cast<std::int64_t>(e)] - ref[e]));
  CHECK(worst < 1e-12);
}
