// Broadcasting as NumPy and PyTorch do it — in add, mul, the batched matmul and boolean masks —
// against loops written out here, gradients summed over the broadcast axes (gradcheck), and the
// same bits for any thread count.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

/// Element idx (of the output, rank r) of an operand of dims d broadcast onto it.
std::int64_t broadcast_offset(const dims_t& d, const std::vector<std::int64_t>& idx) {
  std::int64_t off = 0;
  const int r = static_cast<int>(idx.size());
  for (int k = 0; k < d.rank; ++k) {
    const std::int64_t i = d.d[k] == 1 ? 0 : idx[static_cast<std::size_t>(r - d.rank + k)];
    off = off * d.d[k] + i;
  }
  return off;
}

/// y = f(a, b) elementwise over `out`, a and b broadcast, written out.
template <class F>
tensor<double> elementwise(const tensor<double>& a, const tensor<double>& b, dims_t out, F f) {
  tensor<double> y(out);
  for (std::int64_t e = 0; e < y.size(); ++e) {
    const auto idx = out.index_of(e);
    y[e] = f(a[broadcast_offset(a.dims(), idx)], b[broadcast_offset(b.dims(), idx)]);
  }
  return y;
}

template <class G>
void require_forward(const G& g, const tensor<double>& a, const tensor<double>& b, const tensor<double>& want) {
  param_store<double> none;
  auto ex = g.template executor<double>(none);
  ex.forward({{"a", a}, {"b", b}});
  auto y = ex.output();
  REQUIRE(y.dims == want.dims());
  for (std::int64_t e = 0; e < want.size(); ++e) CHECK(y[e] == want[e]);
}

template <class A, class B>
void check_add_mul(dims_t da, dims_t db, dims_t out) {
  auto a = input<"a", A>();
  auto b = input<"b", B>();
  const auto as = test::random_tensor<double>(da, 1), bs = test::random_tensor<double>(db, 2);
  param_store<double> none;
  require_forward(make_graph(add(a, b)), as, bs, elementwise(as, bs, out, [](double x, double y) { return x + y; }));
  require_forward(make_graph(mul(a, b)), as, bs, elementwise(as, bs, out, [](double x, double y) { return x * y; }));
  test::require_gradcheck(make_graph(add(a, b)), none, {{"a", as}, {"b", bs}});
  test::require_gradcheck(make_graph(mul(a, b)), none, {{"a", as}, {"b", bs}});
}

}  // namespace

TEST_CASE("add and mul broadcast size-1 and missing axes of either operand, and sum their gradients back") {
  SECTION("a bias [4] on [2, 3, 4]") {
    check_add_mul<shape<fix<2>, fix<3>, fix<4>>, shape<fix<4>>>({2, 3, 4}, {4}, {2, 3, 4});
  }
  SECTION("[2, 1, 4] and [3, 1]: both broadcast") {
    check_add_mul<shape<fix<2>, fix<1>, fix<4>>, shape<fix<3>, fix<1>>>({2, 1, 4}, {3, 1}, {2, 3, 4});
  }
  SECTION("a float mask [1, 3, 5] on scores [2, 2, 3, 5]") {
    check_add_mul<shape<fix<2>, fix<2>, fix<3>, fix<5>>, shape<fix<1>, fix<3>, fix<5>>>({2, 2, 3, 5}, {1, 3, 5},
                                                                                          {2, 2, 3, 5});
  }
  SECTION("[2, 1, 3, 1] and [2, 4, 1, 5]") {
    check_add_mul<shape<fix<2>, fix<1>, fix<3>, fix<1>>, shape<fix<2>, fix<4>, fix<1>, fix<5>>>({2, 1, 3, 1},
                                                                                                  {2, 4, 1, 5},
                                                                                                  {2, 4, 3, 5});
  }
  SECTION("a per-row scale [B, T, 1] on [B, T, D], dynamic dims") {
    check_add_mul<shape<dyn<"B">, dyn<"T">, fix<1>>, shape<dyn<"B">, dyn<"T">, fix<6>>>({2, 3, 1}, {2, 3, 6},
                                                                                         {2, 3, 6});
  }
  SECTION("a scalar [1] on [3, 2]") { check_add_mul<shape<fix<3>, fix<2>>, shape<fix<1>>>({3, 2}, {1}, {3, 2}); }
}

TEST_CASE("the sums over broadcast axes give the same bits for 1, 2 and 4 threads") {
  auto a = input<"a", shape<dyn<"B">, fix<1>, dyn<"T">, fix<1>>>();
  auto b = input<"b", shape<dyn<"B">, fix<8>, dyn<"T">, fix<40>>>();
  auto g = make_graph(sum(mul(add(a, b), b)));
  const auto as = test::random_tensor<float>({3, 1, 500, 1}, 3), bs = test::random_tensor<float>({3, 8, 500, 40}, 4);
  param_store<float> none;
  std::vector<std::vector<float>> grads;
  for (int threads : {1, 2, 4}) {
    auto ex = g.executor<float>(none, {.threads = threads, .input_grads = true});
    ex.forward({{"a", as}, {"b", bs}});
    ex.backward();
    auto ga = ex.input_grad("a"), gb = ex.input_grad("b");
    std::vector<float> all(ga.data, ga.data + ga.size());
    all.insert(all.end(), gb.data, gb.data + gb.size());
    grads.push_back(all);
  }
  CHECK(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)) == 0);
  CHECK(std::memcmp(grads[0].data(), grads[2].data(), grads[0].size() * sizeof(float)) == 0);
}

TEST_CASE("matmul broadcasts size-1 batch dims: keys [B, Hkv, 1, S, d] shared by query groups [B, Hkv, G, T, d]") {
  auto q = input<"a", shape<fix<2>, fix<2>, fix<3>, fix<4>, fix<5>>>();  // [B, Hkv, G, T, d]
  auto k = input<"b", shape<fix<2>, fix<2>, fix<1>, fix<6>, fix<5>>>();  // [B, Hkv, 1, S, d]
  auto g = make_graph(matmul<false, true>(q, k));                        // [B, Hkv, G, T, S]
  const auto qs = test::random_tensor<double>({2, 2, 3, 4, 5}, 5), ks = test::random_tensor<double>({2, 2, 1, 6, 5}, 6);
  param_store<double> none;
  auto ex = g.executor<double>(none);
  ex.forward({{"a", qs}, {"b", ks}});
  auto c = ex.output();
  REQUIRE(c.dims == dims_t{2, 2, 3, 4, 6});
  for (std::int64_t e = 0; e < c.size(); ++e) {  // c[b, h, g, t, s] = Σ_i q[b, h, g, t, i] k[b, h, 0, s, i]
    const auto i = c.dims.index_of(e);
    double want = 0;
    for (std::int64_t x = 0; x < 5; ++x) want += qs.at({i[0], i[1], i[2], i[3], x}) * ks.at({i[0], i[1], 0, i[4], x});
    CHECK(c[e] == Approx(want).epsilon(1e-12));
  }
  test::require_gradcheck(g, none, {{"a", qs}, {"b", ks}});
  SECTION("both operands broadcast, transposed a, 1 in the middle") {
    auto a = input<"a", shape<fix<2>, fix<1>, fix<5>, fix<3>>>();  // [2, 1, K, M] transposed
    auto b = input<"b", shape<fix<3>, fix<5>, fix<4>>>();          // [3, K, N]
    test::require_gradcheck(make_graph(matmul<true, false>(a, b)), none,
                            {{"a", test::random_tensor<double>({2, 1, 5, 3}, 7)},
                             {"b", test::random_tensor<double>({3, 5, 4}, 8)}});
  }
}

TEST_CASE("a boolean mask with its first axis on the batch: per sequence [B, T, S] and per key [B, S]") {
  auto x = input<"x", shape<fix<2>, fix<3>, fix<4>, fix<5>>>();  // scores [B, H, T, S]
  tensor<std::uint8_t> seq(dims_t{2, 4, 5}), key(dims_t{2, 5});
  for (std::int64_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<std::uint8_t>(i % 3 != 0);
  for (std::int64_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(i % 4 != 1);
  const auto xs = test::random_tensor<double>({2, 3, 4, 5}, 9);
  param_store<double> none;
  auto ms = input<"m", shape<fix<2>, fix<4>, fix<5>>, bool>();
  auto ks = input<"m", shape<fix<2>, fix<5>>, bool>();
  auto g1 = make_graph(mask_bool<1>(x, ms));
  auto ex1 = g1.executor<double>(none);
  ex1.forward({{"x", xs}, {"m", seq}});
  auto y1 = ex1.output();
  auto g2 = make_graph(mask_bool<1>(x, ks));
  auto ex2 = g2.executor<double>(none);
  ex2.forward({{"x", xs}, {"m", key}});
  auto y2 = ex2.output();
  for (std::int64_t e = 0; e < y1.size(); ++e) {
    const auto i = y1.dims.index_of(e);  // [b, h, t, s]
    const bool a1 = seq.at({i[0], i[2], i[3]}) != 0, a2 = key.at({i[0], i[3]}) != 0;
    CHECK(y1[e] == (a1 ? xs[e] : -std::numeric_limits<double>::infinity()));
    CHECK(y2[e] == (a2 ? xs[e] : -std::numeric_limits<double>::infinity()));
  }
  test::require_gradcheck(make_graph(softmax(mask_bool<1>(x, ms))), none, {{"x", xs}, {"m", seq}});
  test::require_gradcheck(make_graph(softmax(mask_bool<1>(x, ks))), none, {{"x", xs}, {"m", key}});
}
