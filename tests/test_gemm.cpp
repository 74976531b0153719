// ops::gemm in single precision: loom's own kernel for small N (ops/sgemm_avx512.cpp, on CPUs with
// AVX-512) and the BLAS for the rest must both give C = alpha · op(A) · op(B) + beta · C, for
// every transpose, leading dimensions wider than the matrices, tails of rows and columns, and
// beta = 0 never reading C. The reference is the triple loop in double.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "../ops/blas.hpp"
#include "../ops/cpu_features.hpp"
#include "../ops/gemm_chunks.hpp"
#include "../ops/packing_pool.hpp"
#include "../ops/sgemm_avx512.hpp"
#include "../ops/sgemm_choice.hpp"

using namespace loom;
using i64 = std::int64_t;

namespace {

struct product {
  bool ta, tb;
  i64 m, n, k;
  float alpha, beta;
};

// Runs ops::gemm on random operands stored with padded leading dimensions; returns the largest
// error relative to Σ|a·b| + |beta·c| per element (the scale float rounding works at).
double worst_error(const product& p, bool nan_in_c) {
  std::mt19937 rng(static_cast<unsigned>(p.m * 131 + p.n * 17 + p.k * 7 + p.ta * 3 + p.tb));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const i64 a_rows = p.ta ? p.k : p.m, a_cols = p.ta ? p.m : p.k;
  const i64 b_rows = p.tb ? p.n : p.k, b_cols = p.tb ? p.k : p.n;
  const i64 lda = a_cols + 3, ldb = b_cols + 5, ldc = p.n + 7;
  std::vector<float> a(static_cast<std::size_t>(a_rows * lda)), b(static_cast<std::size_t>(b_rows * ldb)),
      c(static_cast<std::size_t>(p.m * ldc));
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  for (auto& x : c) x = nan_in_c ? std::numeric_limits<float>::quiet_NaN() : u(rng);
  const std::vector<float> c0 = c;
  ops::gemm<float>(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), lda, b.data(), ldb, p.beta, c.data(), ldc);
  double worst = 0;
  for (i64 i = 0; i < p.m; ++i) {
    for (i64 j = 0; j < p.n; ++j) {
      double sum = 0, mag = 0;
      for (i64 q = 0; q < p.k; ++q) {
        const double x = p.ta ? a[q * lda + i] : a[i * lda + q];
        const double y = p.tb ? b[j * ldb + q] : b[q * ldb + j];
        sum += x * y;
        mag += std::fabs(x * y);
      }
      const double old = p.beta == 0.f ? 0.0 : double(p.beta) * c0[i * ldc + j];
      const double want = double(p.alpha) * sum + old;
      const double scale = std::fabs(double(p.alpha)) * mag + std::fabs(old) + 1e-30;
      const double error = std::fabs(double(c[i * ldc + j]) - want) / scale;
      if (!std::isfinite(error)) return 1.0;  // NaN compares false: never let it pass as small
      worst = std::max(worst, error);
    }
    for (i64 j = p.n; j < ldc; ++j)  // the padding of each row of C is left alone
      if (!(std::isnan(c0[i * ldc + j]) ? std::isnan(c[i * ldc + j]) : c[i * ldc + j] == c0[i * ldc + j])) return 1.0;
  }
  return worst;
}

// Whether loom's kernel runs on this CPU (AVX-512, or AVX2 and FMA); if not, says that the
// calling case checks nothing (the BLAS computes its products, with no promise about their bits).
bool kernel_runs() {
  if (__builtin_cpu_supports("avx512f") || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
    return true;
  WARN("neither AVX-512 nor AVX2 + FMA on this CPU: loom's kernel is not used, this case checks nothing");
  return false;
}

}  // namespace

TEST_CASE("single-precision gemm matches the double-precision product for every transpose and ragged sizes") {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (i64 m : {1, 2, 7, 8, 9, 33, 70})
        for (i64 n : {2, 15, 16, 40, 48, 64, 100, 272, 1000, 1040})
          for (i64 k : {1, 5, 64, 300, 1100}) {
            const product p{ta, tb, m, n, k, 1.f, 0.f};
            INFO("ta " << ta << " tb " << tb << " m " << m << " n " << n << " k " << k);
            CHECK(worst_error(p, false) < 1e-5);
          }
}

TEST_CASE("a one-row product (a GEMV) matches the double-precision product for every k from 1 to 200") {
  // loom's GEMV sums a row of b in 16-float blocks spread over four partial sums (k >= 64) or
  // in one (k < 64): every tail of 1 to 63 floats, in every partial sum, is met here
  for (bool tb : {false, true})
    for (i64 k = 1; k <= 200; ++k) {
      const product p{false, tb, 1, 9, k, 1.f, 0.f};
      INFO("tb " << tb << " k " << k);
      CHECK(worst_error(p, false) < 1e-5);
    }
}

TEST_CASE("gemm scales by alpha, adds beta times C, and does not read C when beta is 0") {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& [alpha, beta] : {std::pair{0.125f, 1.f}, {-2.f, 0.5f}, {1.f, 0.f}})
        for (i64 m : {37, 1})         // a product, a GEMV
          for (i64 n : {32, 100, 1200}) {  // loom's kernel (full, ragged), then (m = 37) the BLAS
            const product p{ta, tb, m, n, 45, alpha, beta};
            INFO("ta " << ta << " tb " << tb << " alpha " << alpha << " beta " << beta << " m " << m << " n " << n);
            CHECK(worst_error(p, false) < 1e-5);
            if (beta == 0.f) CHECK(worst_error(p, true) < 1e-5);  // NaN in C must not leak in
          }
}

TEST_CASE("loom's kernel takes only the shapes it is made for and leaves the rest untouched") {
  std::vector<float> a(4100 * 8, 1.f), b(4100 * 1100, 1.f), c(8 * 1100, 7.f);
  auto takes = [&](bool ta, bool tb, i64 m, i64 n, i64 k) {
    return ops::sgemm_avx512(ta, tb, m, n, k, 1.f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.f, c.data(), n);
  };
  // never: both transposed, N below 16, K above 4096 or zero, no rows
  CHECK_FALSE(takes(true, true, 4, 32, 8));
  CHECK_FALSE(takes(false, false, 4, 8, 8));
  CHECK_FALSE(takes(false, false, 4, 32, 4097));
  CHECK_FALSE(takes(false, false, 4, 32, 0));
  CHECK_FALSE(takes(false, false, 0, 32, 8));
  CHECK(c[0] == 7.f);  // refused: nothing written
  if (__builtin_cpu_supports("avx512f")) {  // the kernel's own shapes, when the CPU has it
    CHECK(takes(false, false, 4, 32, 8));
    CHECK(takes(false, true, 4, 1024, 1024));
    CHECK(takes(false, false, 4, 32, 4096));
    CHECK(c[0] == 4096.f);
    CHECK(takes(false, false, 4, 1090, 3));  // N beyond 1024, ragged
    CHECK(c[4 * 1090 - 1] == 3.f);
    CHECK(takes(false, false, 8, 1000, 2));  // a ragged N
    CHECK(takes(true, false, 4, 40, 3));
    CHECK(c[0] == 3.f);  // the last product: 3 ones times ones
    CHECK(c[39] == 3.f);  // the ragged edge (columns past N untouched: the first test case)
  }
}

TEST_CASE("every element of a product has the same bits however the rows are split") {
  // the executor splits products into row chunks by size only; loom's kernel makes each element
  // one chain over k, so even a different split gives the same bits (a chunk of one row is a
  // GEMV, which the BLAS computes: chunks of 10 here). Without AVX-512 the BLAS computes these,
  // and its splits are not promised to agree bit for bit: nothing to check.
  if (!kernel_runs()) return;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const i64 m = 45, n = 64, k = 200;
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  std::vector<float> whole(static_cast<std::size_t>(m * n)), split(static_cast<std::size_t>(m * n));
  ops::gemm<float>(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, whole.data(), n);
  for (i64 r0 = 0; r0 < m; r0 += 10) {
    const i64 rows = std::min<i64>(10, m - r0);
    ops::gemm<float>(false, false, rows, n, k, 1.f, a.data() + r0 * k, k, b.data(), n, 0.f, split.data() + r0 * n, n);
  }
  CHECK(whole == split);
}

TEST_CASE("a product whose rows of B are 4 KiB apart (copied into panels) has the bits of one read in place") {
  // loom's kernel copies op(B) = B into panels only when B's row stride is a multiple of 4 KiB
  // (and M > 32); read in place or from the copy, each element is the same chain over k
  if (!kernel_runs()) return;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (bool ta : {false, true}) {
    const i64 m = 70, n = 80, k = 37, lda = ta ? m : k;
    std::vector<float> a(static_cast<std::size_t>(m * k)), dense(static_cast<std::size_t>(k * n)),
        wide(static_cast<std::size_t>(k * 1024), std::numeric_limits<float>::quiet_NaN());
    for (auto& x : a) x = u(rng);
    for (i64 q = 0; q < k; ++q)
      for (i64 j = 0; j < n; ++j) dense[q * n + j] = wide[q * 1024 + j] = u(rng);
    std::vector<float> in_place(static_cast<std::size_t>(m * n)), copied(static_cast<std::size_t>(m * n));
    REQUIRE(ops::sgemm_avx512(ta, false, m, n, k, 1.f, a.data(), lda, dense.data(), n, 0.f, in_place.data(), n));
    REQUIRE(ops::sgemm_avx512(ta, false, m, n, k, 1.f, a.data(), lda, wide.data(), 1024, 0.f, copied.data(), n));
    INFO("ta " << ta);
    // (the in-place path's accuracy against the double product is the first test case's: its
    // rows are b_cols + 5 floats apart)
    CHECK(in_place == copied);  // and the NaNs past column n of the wide rows were never read
  }
}

TEST_CASE("a one-row product (decoding's GEMV) has the same bits however its columns are split") {
  std::vector<float> one{1.f}, out(1);
  if (!ops::sgemv_avx512(false, 1, 1, 1.f, one.data(), one.data(), 1, 0.f, out.data())) {
    SUCCEED("no AVX-512 on this CPU: the BLAS's GEMV runs instead");
    return;
  }
  for (bool tb : {false, true})
    for (i64 k : {7, 16, 300}) {
      const i64 n = 77, ldb = (tb ? k : n) + 3;
      std::mt19937 rng(static_cast<unsigned>(k * 2 + tb));
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      std::vector<float> x(static_cast<std::size_t>(k)), b(static_cast<std::size_t>((tb ? n : k) * ldb));
      for (auto& v : x) v = u(rng);
      for (auto& v : b) v = u(rng);
      std::vector<float> whole(static_cast<std::size_t>(n)), split(static_cast<std::size_t>(n));
      REQUIRE(ops::sgemv_avx512(tb, n, k, 1.f, x.data(), b.data(), ldb, 0.f, whole.data()));
      for (i64 j0 = 0; j0 < n; j0 += 21) {  // columns [j0, j0 + 21): ragged against the 4 rows and 64 columns
        const i64 w = std::min<i64>(21, n - j0);
        REQUIRE(ops::sgemv_avx512(tb, w, k, 1.f, x.data(), tb ? b.data() + j0 * ldb : b.data() + j0, ldb, 0.f,
                                  split.data() + j0));
      }
      INFO("tb " << tb << " k " << k);
      CHECK(std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("op(B) packed once gives every row chunk the bits of the unpacked product, epilogue and beta included") {
  // sgemm_packed_b packs a layer's weight once for all its row chunks; the chunks must compute
  // what sgemm_avx512 computes packing op(B) itself (or reading it in place)
  if (!kernel_runs()) return;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  struct shape {
    bool ta, tb;
    i64 n, k, ldb;
  };
  // transposed (always packed); N ragged against the 32-column panels (packed); a row stride of
  // 1024 floats (packed); B [K, N] with N a multiple of 16 and an ordinary stride (read in place)
  for (const shape s : {shape{false, true, 80, 37, 37 + 3}, shape{false, true, 1024, 64, 64}, shape{false, false, 70, 33, 70},
                        shape{true, false, 64, 20, 1024}, shape{false, false, 96, 50, 96 + 16}}) {
    const i64 m = 53, lda = s.ta ? m + 2 : s.k + 2, ldc = s.n + 5;
    std::vector<float> a(static_cast<std::size_t>((s.ta ? s.k : m) * lda)),
        b(static_cast<std::size_t>((s.tb ? s.n : s.k) * s.ldb)), bias(static_cast<std::size_t>(s.n)),
        res(static_cast<std::size_t>(m * ldc)), c0(static_cast<std::size_t>(m * ldc));
    for (auto* v : {&a, &b, &bias, &res, &c0})
      for (auto& x : *v) x = u(rng);
    const ops::sgemm_packed_b packed(s.tb, s.n, s.k, b.data(), s.ldb);
    INFO("ta " << s.ta << " tb " << s.tb << " n " << s.n << " k " << s.k << " ldb " << s.ldb);
    // the AVX2 kernel (CPUs without AVX-512) packs every operand
    CHECK(packed.packed() ==
          (std::string(ops::sgemm_avx512_tiling().isa) == "avx2" || s.tb || s.n % 16 != 0 || s.ldb % 1024 == 0 ||
           s.k * s.ldb > (1 << 18)));
    CHECK(packed.count() == s.n);
    CHECK(packed.k() == s.k);
    for (const float beta : {0.f, 0.5f})
      for (const bool relu : {false, true}) {
        const ops::gemm_epilogue e{bias.data(), relu, beta == 0.f ? res.data() : nullptr, ldc};
        std::vector<float> whole = c0, chunked = c0;
        REQUIRE(ops::sgemm_avx512(s.ta, s.tb, m, s.n, s.k, 0.75f, a.data(), lda, b.data(), s.ldb, beta, whole.data(),
                                  ldc, e));
        for (i64 r0 = 0; r0 < m; r0 += 16) {  // chunks of 16 rows, the last ragged (5)
          const i64 rows = std::min<i64>(16, m - r0);
          const float* ar = s.ta ? a.data() + r0 : a.data() + r0 * lda;
          const ops::gemm_epilogue er{e.bias, relu, e.residual ? e.residual + r0 * ldc : nullptr, ldc};
          REQUIRE(ops::sgemm_avx512(s.ta, rows, 0.75f, ar, lda, packed, beta, chunked.data() + r0 * ldc, ldc, er));
        }
        INFO("beta " << beta << " relu " << relu);
        CHECK(whole == chunked);  // the padding past column n of each row of C included
        // column blocks of 32 or 64 (the fused linear's split of a few rows over the threads); the
        // last takes what is left when fewer than 16 columns would (the kernel's narrowest product)
        for (const i64 width : {i64{32}, i64{64}}) {
          std::vector<float> blocks = c0;
          for (i64 j0 = 0, w = 0; j0 < s.n; j0 += w) {
            w = s.n - j0 < width + 16 ? s.n - j0 : width;
            const ops::gemm_epilogue ej{e.bias + j0, relu, e.residual ? e.residual + j0 : nullptr, ldc};
            REQUIRE(ops::sgemm_avx512_columns(s.ta, m, 0.75f, a.data(), lda, packed, j0, w, beta, blocks.data() + j0,
                                              ldc, ej));
          }
          INFO("column blocks of " << width);
          CHECK(whole == blocks);
        }
      }
    // a range outside op(B), or (packed) not on a panel's first column: refused, nothing touched
    std::vector<float> c = c0;
    CHECK_FALSE(ops::sgemm_avx512_columns(s.ta, m, 1.f, a.data(), lda, packed, 32, s.n, 0.f, c.data(), ldc));
    CHECK_FALSE(ops::sgemm_avx512_columns(s.ta, m, 1.f, a.data(), lda, packed, -32, 32, 0.f, c.data(), ldc));
    if (packed.packed())
      CHECK_FALSE(ops::sgemm_avx512_columns(s.ta, m, 1.f, a.data(), lda, packed, 16, 16, 0.f, c.data(), ldc));
    CHECK(c == c0);
  }
  // an operand above 2^20 floats is not packed whole: the products pack it a panel at a time
  std::vector<float> wide(static_cast<std::size_t>(2048 * 1024), 1.f), x(2 * 1024, 1.f), c(2 * 2048, -3.f);
  const ops::sgemm_packed_b too_wide(true, 2048, 1024, wide.data(), 1024);
  CHECK_FALSE(too_wide.packed());
  if (std::string(ops::sgemm_avx512_tiling().isa) != "none") {
    CHECK(ops::sgemm_avx512(false, 2, 1.f, x.data(), 1024, too_wide, 0.f, c.data(), 2048));
    CHECK(std::all_of(c.begin(), c.end(), [](float v) { return v == 1024.f; }));
  }
  // and K above 4096 is not taken: nothing is packed and nothing is touched
  std::vector<float> deep(static_cast<std::size_t>(32 * 4100), 1.f), y(2 * 4100, 1.f), d(2 * 32, -3.f);
  const ops::sgemm_packed_b too_deep(true, 32, 4100, deep.data(), 4100);
  CHECK_FALSE(too_deep.packed());
  CHECK_FALSE(ops::sgemm_avx512(false, 2, 1.f, y.data(), 4100, too_deep, 0.f, d.data(), 32));
  CHECK(std::all_of(d.begin(), d.end(), [](float v) { return v == -3.f; }));
}

TEST_CASE("a transposed op(A) copied into strips, in one product or once for its column blocks, has the bits of one read in place") {
  // a weight gradient dzᵀ · x: loom's kernel copies a transposed op(A) into strips of the tile's
  // rows when four panels or more read it (in row blocks of at most 2^18 floats), and
  // sgemm_packed_a copies it once for column blocks; each element must stay the chain of FMAs
  // that a product of one panel (32 columns: never copied) computes reading A in place
  if (!__builtin_cpu_supports("avx512f")) {  // the AVX2 kernel (or none) reads op(A) in place
    const std::vector<float> a(64 * 64, 1.f);
    CHECK_FALSE(ops::sgemm_packed_a(true, 64, 64, a.data(), 64).packed());
    return;
  }
  ops::sgemm_force_isa(ops::sgemm_isa::avx512);  // even when LOOM_SGEMM_ISA=avx2 runs the tests
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  struct shape {
    i64 m, n, k;
  };
  // whole and ragged strips; 300 rows of k 1000 make two row blocks; n 136 ends in a panel of 8
  for (const shape s : {shape{1, 128, 3}, shape{45, 160, 37}, shape{300, 136, 1000}, shape{64, 256, 1}})
    for (const int tile : {8, 12}) {
      ops::sgemm_avx512_force_tile_rows(tile);
      const i64 lda = s.m + 3, ldb = s.n + 2, ldc = s.n + 5;
      std::vector<float> a(static_cast<std::size_t>(s.k * lda)), b(static_cast<std::size_t>(s.k * ldb)),
          bias(static_cast<std::size_t>(s.n)), res(static_cast<std::size_t>(s.m * ldc)),
          c0(static_cast<std::size_t>(s.m * ldc));
      for (auto* v : {&a, &b, &bias, &res, &c0})
        for (auto& x : *v) x = u(rng);
      INFO("m " << s.m << " n " << s.n << " k " << s.k << " tile " << tile);
      for (const float beta : {0.f, 0.5f}) {
        const ops::gemm_epilogue e{bias.data(), beta != 0.f, beta == 0.f ? res.data() : nullptr, ldc};
        std::vector<float> by_panel = c0, whole = c0, shared = c0;
        // one panel per product, the last two when fewer than 16 columns are left: op(A) read in place
        for (i64 j0 = 0, w = 0; j0 < s.n; j0 += w) {
          w = s.n - j0 < 32 + 16 ? s.n - j0 : 32;
          const ops::gemm_epilogue ej{e.bias + j0, e.relu, e.residual ? e.residual + j0 : nullptr, ldc};
          REQUIRE(ops::sgemm_avx512(true, false, s.m, w, s.k, 0.75f, a.data(), lda, b.data() + j0, ldb, beta,
                                    by_panel.data() + j0, ldc, ej));
        }
        REQUIRE(ops::sgemm_avx512(true, false, s.m, s.n, s.k, 0.75f, a.data(), lda, b.data(), ldb, beta, whole.data(),
                                  ldc, e));
        INFO("beta " << beta);
        CHECK(whole == by_panel);  // the padding past column n of each row included
        if (beta != 0.f) continue;  // (the shared copy's products take no epilogue: a gradient's)
        const ops::sgemm_packed_a packed(true, s.m, s.k, a.data(), lda);
        CHECK(packed.packed());
        std::vector<float> plain = c0;  // the same product without the epilogue, in one call
        REQUIRE(ops::sgemm_avx512(true, false, s.m, s.n, s.k, 0.75f, a.data(), lda, b.data(), ldb, 0.f, plain.data(),
                                  ldc));
        for (i64 j0 = 0, w = 0; j0 < s.n; j0 += w) {  // blocks of 64; the last takes what is left (≥ 16)
          w = s.n - j0 < 64 + 16 ? s.n - j0 : 64;
          REQUIRE(ops::sgemm_avx512(packed, false, w, 0.75f, b.data() + j0, ldb, 0.f, shared.data() + j0, ldc));
        }
        std::vector<float> narrow = c0;  // fewer than 16 columns: refused, nothing touched
        CHECK_FALSE(ops::sgemm_avx512(packed, false, 8, 0.75f, b.data(), ldb, 0.f, narrow.data(), ldc));
        CHECK(narrow == c0);
        CHECK(shared == plain);
        // tiles forced to the other height after the copy: read in place, the same bits
        ops::sgemm_avx512_force_tile_rows(tile == 8 ? 12 : 8);
        std::vector<float> other = c0;
        REQUIRE(ops::sgemm_avx512(packed, false, s.n, 0.75f, b.data(), ldb, 0.f, other.data(), ldc));
        CHECK(other == plain);
        ops::sgemm_avx512_force_tile_rows(tile);
      }
    }
  ops::sgemm_avx512_force_tile_rows(0);
  // not copied: op(A) not transposed, or too large (M · K above 2^22); the products still right
  std::vector<float> a(static_cast<std::size_t>(4100 * 1024), 0.5f), b(1024 * 32, 2.f), c(4100 * 32, -1.f);
  CHECK_FALSE(ops::sgemm_packed_a(false, 64, 64, a.data(), 64).packed());
  const ops::sgemm_packed_a big(true, 4100, 1024, a.data(), 4100);
  CHECK_FALSE(big.packed());
  REQUIRE(ops::sgemm_avx512(big, false, 32, 1.f, b.data(), 32, 0.f, c.data(), 32));
  CHECK(std::all_of(c.begin(), c.end(), [](float v) { return v == 1024.f; }));
  ops::sgemm_force_isa(ops::sgemm_isa::cpu);
}

TEST_CASE("tiles of 8 and of 12 rows give every element the same bits, and only those shapes can be forced") {
  // the tile's rows are chosen per CPU (a table, or timed at the first product): a speed choice
  // that must not change a single bit
  CHECK_THROWS_AS(ops::sgemm_avx512_force_tile_rows(7), std::invalid_argument);
  CHECK_THROWS_AS(ops::sgemm_avx512_force_tile_rows(-8), std::invalid_argument);
  if (!__builtin_cpu_supports("avx512f")) {  // AVX2 (3 rows, fixed) or no kernel at all
    const auto t = ops::sgemm_avx512_tiling();
    CHECK(std::string(t.isa) == (kernel_runs() ? "avx2" : "none"));
    CHECK(t.rows == (kernel_runs() ? 3 : 0));
    CHECK(t.packed_rows == t.rows);
    CHECK(ops::sgemm_avx512_measure_tile_rows() == 0);
    CHECK(ops::sgemm_avx512_measure_tile_rows(true) == 0);
    CHECK_THROWS_AS(ops::sgemm_avx512_force_tile_rows(12), std::invalid_argument);
    CHECK_THROWS_AS(ops::sgemm_force_isa(ops::sgemm_isa::avx512), std::invalid_argument);
    ops::sgemm_avx512_force_tile_rows(0);  // back to the CPU's choice: always allowed
    return;
  }
  ops::sgemm_force_isa(ops::sgemm_isa::avx512);  // even when LOOM_SGEMM_ISA=avx2 runs the tests
  const auto chosen = ops::sgemm_avx512_tiling();
  CHECK(std::string(chosen.isa) == "avx512");
  CHECK((chosen.rows == 8 || chosen.rows == 12));
  CHECK((chosen.packed_rows == 8 || chosen.packed_rows == 12));
  CHECK((std::string(chosen.how) == "table" || std::string(chosen.how) == "measured"));
  for (const bool packed : {false, true}) {
    const int measured = ops::sgemm_avx512_measure_tile_rows(packed);
    CHECK((measured == 8 || measured == 12));
  }
  CHECK(ops::sgemm_avx512_tiling().rows == chosen.rows);  // measuring changes no choice
  CHECK(ops::sgemm_avx512_tiling().packed_rows == chosen.packed_rows);
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  struct shape {
    bool ta, tb;
    i64 m, n, k;
  };
  // rows that are and are not whole tiles of 8 and 12 (1 row is a GEMV, not a tile: 2 is the least)
  for (const shape s : {shape{false, false, 2, 16, 5}, shape{false, true, 13, 40, 37}, shape{true, false, 24, 64, 64},
                        shape{false, false, 59, 96, 130}, shape{true, false, 35, 33, 8}}) {
    const i64 lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    std::vector<float> a(static_cast<std::size_t>(s.m * s.k)), b(static_cast<std::size_t>(s.n * s.k)),
        bias(static_cast<std::size_t>(s.n)), c0(static_cast<std::size_t>(s.m * s.n));
    for (auto* v : {&a, &b, &bias, &c0})
      for (auto& x : *v) x = u(rng);
    std::vector<float> by[2] = {c0, c0};
    for (int t = 0; t < 2; ++t) {
      ops::sgemm_avx512_force_tile_rows(t == 0 ? 8 : 12);
      CHECK(ops::sgemm_avx512_tiling().rows == (t == 0 ? 8 : 12));
      CHECK(ops::sgemm_avx512_tiling().packed_rows == (t == 0 ? 8 : 12));
      CHECK(std::string(ops::sgemm_avx512_tiling().how) == "forced");
      REQUIRE(ops::sgemm_avx512(s.ta, s.tb, s.m, s.n, s.k, 1.5f, a.data(), lda, b.data(), ldb, 0.25f, by[t].data(),
                                s.n, ops::gemm_epilogue{bias.data(), true, nullptr, 0}));
    }
    ops::sgemm_avx512_force_tile_rows(0);
    INFO("ta " << s.ta << " tb " << s.tb << " m " << s.m << " n " << s.n << " k " << s.k);
    CHECK(by[0] == by[1]);
    CHECK(by[0] != c0);  // the product was computed
  }
  CHECK(ops::sgemm_avx512_tiling().rows == chosen.rows);  // back to the CPU's choice
  ops::sgemm_force_isa(ops::sgemm_isa::cpu);
}

TEST_CASE("the AVX2 kernel gives every element the bits of the AVX-512 kernel, packed, in place and with the epilogue") {
  // CPUs without AVX-512 run loom's AVX2 kernel: the same panels and the same chain of FMAs per
  // element, so a model gives the same bits on either kind of CPU. Both run here only on a CPU
  // with AVX-512.
  if (!__builtin_cpu_supports("avx512f")) {
    SUCCEED("no AVX-512 on this CPU: nothing to compare the AVX2 kernel with");
    return;
  }
  const std::string own = ops::sgemm_avx512_tiling().isa;  // avx512, or avx2 under LOOM_SGEMM_ISA
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  struct shape {
    bool ta, tb;
    i64 m, n, k, ldb;
  };
  // transposed B (8 × 8 blocks and ragged edges: n 45, k 21), in place (n a multiple of 16),
  // ragged n packed from rows (n 37: lanes past 32 + 5), a 4 KiB stride, op(A) transposed, one
  // panel of 16 columns, K = 1, and K beyond the AVX2 kernel's blocks of 128 (300, 257: the sums
  // carried from block to block)
  for (const shape s : {shape{false, true, 10, 45, 21, 21 + 2}, shape{false, false, 7, 64, 33, 64 + 16},
                        shape{false, false, 40, 37, 19, 37}, shape{true, false, 50, 48, 30, 1024},
                        shape{true, false, 5, 16, 9, 16}, shape{false, true, 4, 96, 1, 1},
                        shape{true, false, 20, 40, 300, 40}, shape{false, true, 11, 33, 257, 257}}) {
    const i64 lda = s.ta ? s.m : s.k, ldc = s.n + 3;
    std::vector<float> a(static_cast<std::size_t>(s.m * s.k)), b(static_cast<std::size_t>((s.tb ? s.n : s.k) * s.ldb)),
        bias(static_cast<std::size_t>(s.n)), res(static_cast<std::size_t>(s.m * ldc)), c0(static_cast<std::size_t>(s.m * ldc));
    for (auto* v : {&a, &b, &bias, &res, &c0})
      for (auto& x : *v) x = u(rng);
    c0[0] = std::numeric_limits<float>::quiet_NaN();  // beta · NaN, and relu of NaN
    for (const float beta : {0.f, -0.5f})
      for (const bool relu : {false, true}) {
        const ops::gemm_epilogue e{bias.data(), relu, relu ? nullptr : res.data(), ldc};
        std::vector<float> by[2] = {c0, c0}, packed[2] = {c0, c0};
        for (int t = 0; t < 2; ++t) {
          ops::sgemm_force_isa(t == 0 ? ops::sgemm_isa::avx512 : ops::sgemm_isa::avx2);
          CHECK(std::string(ops::sgemm_avx512_tiling().isa) == (t == 0 ? "avx512" : "avx2"));
          REQUIRE(ops::sgemm_avx512(s.ta, s.tb, s.m, s.n, s.k, 1.25f, a.data(), lda, b.data(), s.ldb, beta, by[t].data(),
                                    ldc, e));
          const ops::sgemm_packed_b pb(s.tb, s.n, s.k, b.data(), s.ldb);
          REQUIRE(ops::sgemm_avx512(s.ta, s.m, 1.25f, a.data(), lda, pb, beta, packed[t].data(), ldc, e));
        }
        ops::sgemm_force_isa(ops::sgemm_isa::cpu);
        INFO("ta " << s.ta << " tb " << s.tb << " m " << s.m << " n " << s.n << " k " << s.k << " beta " << beta
                   << " relu " << relu);
        CHECK(std::memcmp(by[0].data(), by[1].data(), by[0].size() * sizeof(float)) == 0);  // NaNs included
        CHECK(std::memcmp(packed[0].data(), packed[1].data(), by[0].size() * sizeof(float)) == 0);
        CHECK(std::memcmp(by[0].data(), packed[0].data(), by[0].size() * sizeof(float)) == 0);
        CHECK(by[1][1] != c0[1]);  // computed
      }
  }
  CHECK(ops::sgemm_avx512_tiling().isa == own);  // back to the process's choice
}

TEST_CASE("gemm with a packed op(B) gives gemm's bits for one row (its GEMV) and for many") {
  // a product's row items share one packed weight; the last item may hold a single row, which
  // gemm computes as a GEMV (other bits than the tiles): the packed call must do the same
  std::mt19937 rng(19);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const i64 n = 48, k = 70;
  std::vector<float> a(static_cast<std::size_t>(5 * k)), w(static_cast<std::size_t>(n * k));
  for (auto* v : {&a, &w})
    for (auto& x : *v) x = u(rng);
  const ops::sgemm_packed_b packed(true, n, k, w.data(), k);
  for (const i64 m : {1, 2, 5}) {
    std::vector<float> want(static_cast<std::size_t>(m * n), 0.5f), got = want;
    ops::gemm<float>(false, true, m, n, k, 1.f, a.data(), k, w.data(), k, 0.25f, want.data(), n);
    ops::gemm(false, m, 1.f, a.data(), k, packed, 0.25f, got.data(), n);
    INFO("m " << m);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("the AVX2 kernel's row blocks (products of more than 256 rows) give the bits of row chunks and the right product") {
  // without AVX-512 a product of many rows goes in blocks of 96 rows over op(B) packed whole, op(A)
  // copied into strips of 3 rows; each element must still be the chain of FMAs that a chunk of
  // fewer rows (read in place, panel by panel) computes. Forced to AVX2 on CPUs with AVX-512.
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    SUCCEED("no AVX2 and FMA on this CPU: the AVX2 kernel cannot run");
    return;
  }
  ops::sgemm_force_isa(ops::sgemm_isa::avx2);
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  // m 301: three whole blocks, a fourth of 13 rows (its last strip one row); n 80: panels of 32,
  // 32 and a ragged 16; k 300 crosses the tiles' K blocks of 128; k 1
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const i64 k : {300, 1}) {
        if (ta && tb) continue;  // not a shape the kernel takes (the BLAS computes it)
        const i64 m = 301, n = 80, lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 3, ldc = n + 5;
        std::vector<float> a(static_cast<std::size_t>((ta ? k : m) * lda)),
            b(static_cast<std::size_t>((tb ? n : k) * ldb)), bias(static_cast<std::size_t>(n)),
            res(static_cast<std::size_t>(m * ldc)), c0(static_cast<std::size_t>(m * ldc));
        for (auto* v : {&a, &b, &bias, &res, &c0})
          for (auto& x : *v) x = u(rng);
        c0[5] = std::numeric_limits<float>::quiet_NaN();
        for (const float beta : {0.f, -0.5f})
          for (const bool relu : {false, true}) {
            INFO("ta " << ta << " tb " << tb << " k " << k << " beta " << beta << " relu " << relu);
            const ops::gemm_epilogue e{bias.data(), relu, relu ? nullptr : res.data(), ldc};
            std::vector<float> whole = c0, chunks = c0, columns = c0;
            REQUIRE(ops::sgemm_avx512(ta, tb, m, n, k, 1.25f, a.data(), lda, b.data(), ldb, beta, whole.data(), ldc, e));
            for (i64 r0 = 0; r0 < m; r0 += 100) {  // chunks of at most 100 rows: the panels over all of them
              const ops::gemm_epilogue er{bias.data(), relu, relu ? nullptr : res.data() + r0 * ldc, ldc};
              const float* ar = ta ? a.data() + r0 : a.data() + r0 * lda;
              REQUIRE(ops::sgemm_avx512(ta, tb, std::min<i64>(100, m - r0), n, k, 1.25f, ar, lda, b.data(), ldb, beta,
                                        chunks.data() + r0 * ldc, ldc, er));
            }
            CHECK(std::memcmp(whole.data(), chunks.data(), whole.size() * sizeof(float)) == 0);
            // columns [32, 80) of a packed op(B), all rows at once: row blocks from a panel past the first
            const ops::sgemm_packed_b packed(tb, n, k, b.data(), ldb);
            const ops::gemm_epilogue ec{bias.data() + 32, relu, relu ? nullptr : res.data() + 32, ldc};
            REQUIRE(ops::sgemm_avx512_columns(ta, m, 1.25f, a.data(), lda, packed, 32, n - 32, beta,
                                              columns.data() + 32, ldc, ec));
            for (i64 i = 0; i < m; ++i)
              CHECK(std::memcmp(columns.data() + i * ldc + 32, whole.data() + i * ldc + 32, (n - 32) * sizeof(float)) == 0);
            for (i64 i = 0; i < m; ++i)  // columns [0, 32) and each row's padding untouched
              CHECK(std::memcmp(columns.data() + i * ldc, c0.data() + i * ldc, 32 * sizeof(float)) == 0);
            CHECK(whole[1] != c0[1]);  // computed
          }
      }
  for (const bool ta : {false, true})  // and the product itself, against the double-precision one
    for (const bool tb : {false, true}) {
      INFO("ta " << ta << " tb " << tb);
      CHECK(worst_error(product{ta, tb, 301, 40, 300, 1.f, 0.f}, false) < 1e-5);
      CHECK(worst_error(product{ta, tb, 290, 48, 7, 0.5f, 2.f}, false) < 1e-5);
      CHECK(worst_error(product{ta, tb, 290, 48, 7, 0.5f, 0.f}, true) < 1e-5);  // C (NaN) not read
    }
  ops::sgemm_force_isa(ops::sgemm_isa::cpu);
}

TEST_CASE("a product of many rows (row blocks over all panels, op(B) packed whole) gives the bits of row chunks") {
  // when op(A) spans more than 2 MiB the AVX-512 kernel runs its rows in blocks, each over every
  // panel of op(B) (packed whole when it is copied at all); each element must still be the chain
  // of FMAs that a chunk of 100 rows (one block, panel by panel) computes. m 1000, k 600: two
  // blocks (of 504 and 496 rows with tiles of 8, 504 and 496 with 12); tb: op(B) packed whole,
  // else read in place; beta, the epilogue and ragged n (80: panels of 32, 32 and 16) included.
  if (!kernel_runs() || !__builtin_cpu_supports("avx512f")) {
    SUCCEED("no AVX-512 on this CPU: its row blocks do not run");
    return;
  }
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      if (ta && tb) continue;  // not a shape the kernel takes
      const i64 m = 1000, n = 80, k = 600, lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 3, ldc = n + 5;
      std::vector<float> a(static_cast<std::size_t>((ta ? k : m) * lda)), b(static_cast<std::size_t>((tb ? n : k) * ldb)),
          bias(static_cast<std::size_t>(n)), res(static_cast<std::size_t>(m * ldc)), c0(static_cast<std::size_t>(m * ldc));
      for (auto* v : {&a, &b, &bias, &res, &c0})
        for (auto& x : *v) x = u(rng);
      for (const float beta : {0.f, -0.5f}) {
        INFO("ta " << ta << " tb " << tb << " beta " << beta);
        const ops::gemm_epilogue e{bias.data(), false, res.data(), ldc};
        std::vector<float> whole = c0, chunks = c0;
        REQUIRE(ops::sgemm_avx512(ta, tb, m, n, k, 1.25f, a.data(), lda, b.data(), ldb, beta, whole.data(), ldc, e));
        for (i64 r0 = 0; r0 < m; r0 += 100) {
          const ops::gemm_epilogue er{bias.data(), false, res.data() + r0 * ldc, ldc};
          const float* ar = ta ? a.data() + r0 : a.data() + r0 * lda;
          REQUIRE(ops::sgemm_avx512(ta, tb, 100, n, k, 1.25f, ar, lda, b.data(), ldb, beta, chunks.data() + r0 * ldc,
                                    ldc, er));
        }
        CHECK(std::memcmp(whole.data(), chunks.data(), whole.size() * sizeof(float)) == 0);
        // and right: row 997 (the second block's) against the double-precision sum
        for (const i64 j : {i64{0}, i64{47}, i64{79}}) {
          double sum = 0;
          for (i64 q = 0; q < k; ++q)
            sum += double(ta ? a[q * lda + 997] : a[997 * lda + q]) * double(tb ? b[j * ldb + q] : b[q * ldb + j]);
          const double want = 1.25 * sum + beta * c0[997 * ldc + j] + bias[j] + res[997 * ldc + j];
          CHECK(std::abs(whole[997 * ldc + j] - want) < 1e-3);
        }
        CHECK(whole[997 * ldc + n] == c0[997 * ldc + n]);  // the padding past n untouched
      }
    }
}

TEST_CASE("line_aligned gives a run of n words on a 64-byte boundary inside a buffer that only grows") {
  for (const std::int64_t n : {0, 1, 15, 16, 17, 1000, 1 << 16}) {
    std::vector<float> buffer;
    float* run = loom::ops::line_aligned(buffer, n);
    CHECK(reinterpret_cast<std::uintptr_t>(run) % 64 == 0);
    CHECK(run >= buffer.data());
    CHECK(run + n <= buffer.data() + buffer.size());
    const std::size_t size = buffer.size();
    std::vector<std::uint32_t> words(3);  // a buffer already holding words
    std::uint32_t* w = loom::ops::line_aligned(words, n);
    CHECK(reinterpret_cast<std::uintptr_t>(w) % 64 == 0);
    CHECK(w + n <= words.data() + words.size());
    run = loom::ops::line_aligned(buffer, n / 2);  // a shorter run: the buffer keeps its size
    CHECK(buffer.size() == size);
    CHECK(reinterpret_cast<std::uintptr_t>(run) % 64 == 0);
  }
}

TEST_CASE("a packing buffer of 2 MiB or more starts on a 2 MiB boundary (transparent huge pages)") {
  loom::ops::packing_buffer<float> buffer;
  const float* run = loom::ops::line_aligned(buffer, i64{1} << 20);  // 4 MiB
  CHECK(reinterpret_cast<std::uintptr_t>(buffer.data()) % (std::uintptr_t{1} << 21) == 0);
  CHECK(run == buffer.data());
  // what the packing pool counts against its bound: whole 2 MiB pages from 2 MiB on
  using alloc = loom::huge_page_allocator<float>;
  CHECK(alloc::bytes_held(100) == 400);
  CHECK(alloc::bytes_held(std::size_t{1} << 19) == std::size_t{2} << 20);
  CHECK(alloc::bytes_held((std::size_t{1} << 19) + 1) == std::size_t{4} << 20);
}

namespace {

// batched_gemm of one product on `threads` threads; C starts at c0.
template <class T>
std::vector<T> chunked_product(int threads, bool tx, bool ty, i64 rows, i64 n, i64 k, const std::vector<T>& x,
                               const std::vector<T>& y, const std::vector<T>& c0, T beta) {
  std::vector<T> c = c0;
  tbb::task_arena arena(threads);
  arena.execute([&] {
    ops::gemm_chunks::batched_gemm<T>(tx, ty, 1, rows, n, k, x.data(), tx ? rows : k, 0, y.data(), ty ? k : n, 0,
                                      c.data(), 0, beta);
  });
  return c;
}

// Largest error of c = beta · c0 + op(X) · op(Y) against the sums in double, relative to Σ|x·y| + |beta · c0|.
template <class T>
double chunked_error(bool tx, bool ty, i64 rows, i64 n, i64 k, const std::vector<T>& x, const std::vector<T>& y,
                     const std::vector<T>& c0, T beta, const std::vector<T>& c) {
  double worst = 0;
  for (i64 i = 0; i < rows; ++i)
    for (i64 j = 0; j < n; ++j) {
      double sum = 0, mag = 0;
      for (i64 q = 0; q < k; ++q) {
        const double p = double(tx ? x[q * rows + i] : x[i * k + q]) * double(ty ? y[j * k + q] : y[q * n + j]);
        sum += p;
        mag += std::fabs(p);
      }
      const double old = double(beta) * double(c0[i * n + j]);
      const double error = std::fabs(double(c[i * n + j]) - (sum + old)) / (mag + std::fabs(old) + 1e-30);
      if (!std::isfinite(error)) return 1.0;
      worst = std::max(worst, error);
    }
  return worst;
}

}  // namespace

TEST_CASE("one-row-item BLAS products split by columns or by their sum: right, same bits on 1, 2, 4 threads") {
  namespace gc = loom::ops::gemm_chunks;
  struct shape {
    bool tx, ty;
    i64 rows, n, k;
    float beta;
  };
  // a language model's logits on a few rows (columns split), their gradients (the sum split),
  // a weight gradient's transposed form and an accumulating product
  for (const shape s : {shape{false, true, 64, 5000, 256, 0.f}, shape{false, false, 64, 256, 5000, 0.f},
                        shape{true, false, 48, 200, 4500, 0.f}, shape{false, false, 64, 256, 5000, 1.f},
                        shape{false, true, 40, 300, 9000, 0.5f}}) {
    INFO("tx " << s.tx << " ty " << s.ty << " rows " << s.rows << " n " << s.n << " k " << s.k << " beta " << s.beta);
    // the split paths are what this case is about: one row item, a product the BLAS makes (in
    // double always; in float when loom's kernel does not take it), split
    REQUIRE(s.rows <= gc::row_grain(s.n, s.k));
    if (s.n > gc::blas_block) REQUIRE(gc::blas_column_block<double>(s.tx, s.ty, s.rows, s.n, s.k) == gc::blas_block);
    else REQUIRE(gc::blas_sum_block<double>(s.tx, s.ty, s.rows, s.n, s.k) < s.k);
    std::mt19937 rng(static_cast<unsigned>(s.rows * 7 + s.n * 3 + s.k));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> x(static_cast<std::size_t>(s.rows * s.k)), y(static_cast<std::size_t>(s.n * s.k)),
        c0(static_cast<std::size_t>(s.rows * s.n));
    for (auto& e : x) e = u(rng);
    for (auto& e : y) e = u(rng);
    for (auto& e : c0) e = u(rng);
    const std::vector<float> one = chunked_product(1, s.tx, s.ty, s.rows, s.n, s.k, x, y, c0, s.beta);
    CHECK(chunked_error(s.tx, s.ty, s.rows, s.n, s.k, x, y, c0, s.beta, one) < 1e-5);
    for (const int threads : {2, 4}) {
      INFO(threads << " threads");
      CHECK(chunked_product(threads, s.tx, s.ty, s.rows, s.n, s.k, x, y, c0, s.beta) == one);
    }
    // in double, to its own rounding
    const std::vector<double> xd(x.begin(), x.end()), yd(y.begin(), y.end()), cd(c0.begin(), c0.end());
    const std::vector<double> d = chunked_product(2, s.tx, s.ty, s.rows, s.n, s.k, xd, yd, cd, double(s.beta));
    CHECK(chunked_error(s.tx, s.ty, s.rows, s.n, s.k, xd, yd, cd, double(s.beta), d) < 1e-13);
  }
}

TEST_CASE("sgemm's table of CPUs finds an entry by vendor, family and model, and the products use it") {
  using ops::cpu_vendor;
  using ops::sgemm_choice::table_entry;
  const auto& zen4 = table_entry(cpu_vendor::amd, 25, 17);
  CHECK(std::string(zen4.name) == "AMD family 25 (Zen 4)");
  CHECK(&table_entry(cpu_vendor::amd, 25, 1) == &zen4);  // every model of family 25
  CHECK(std::string(table_entry(cpu_vendor::intel, 6, 207).name) == "Intel family 6 model 207");
  // another model, another family, the other vendor, no known vendor: not in the table, whose
  // tiles are timed (rows 0) and whose panels are copied from 512 KiB on
  for (const auto& e : {table_entry(cpu_vendor::intel, 6, 143), table_entry(cpu_vendor::amd, 26, 2),
                        table_entry(cpu_vendor::intel, 25, 17), table_entry(cpu_vendor::other, 6, 207)}) {
    CHECK(std::string(e.name) == "not in the table");
    CHECK((e.rows == 0 && e.packed_rows == 0 && e.span == i64{1} << 17));
  }
  // this CPU's entry is the one the products report and, on AVX-512, the one their tiles follow
  const auto& here = ops::cpu();
  const auto& mine = table_entry(here.vendor, here.family, here.model);
  const auto tiling = ops::sgemm_avx512_tiling();
  if (std::string(tiling.isa) == "none") return;  // no vector kernel: nothing follows the table
  CHECK(std::string(tiling.cpu) == mine.name);
  CHECK(ops::sgemm_choice::in_place_span() == mine.span);
  if (std::string(tiling.isa) == "avx512" && std::string(tiling.how) != "forced") {
    CHECK(std::string(tiling.how) == (mine.rows != 0 ? "table" : "measured"));
    if (mine.rows != 0) CHECK((tiling.rows == mine.rows && tiling.packed_rows == mine.packed_rows));
  }
}
