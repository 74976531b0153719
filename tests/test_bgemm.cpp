// The bf16 GEMM (ops/bgemm.cpp): rounding float to bf16 to nearest even, then C = alpha · Â · B̂ +
// beta · C with float accumulation in vdpbf16ps's order. Its results against the double-precision
// product of the rounded operands (within the chain's rounding bound) and of the float operands
// (within bf16's), for every transpose and ragged sizes; the AVX512_BF16 kernel against the
// portable loop, bit for bit, on ordinary and extreme values; the same bits however the rows or
// columns are split.
#include <catch2/catch.hpp>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../ops/bgemm.hpp"

using namespace loom;
using i64 = std::int64_t;

namespace {

float bits_float(std::uint32_t u) { return std::bit_cast<float>(u); }
std::uint32_t float_bits(float x) { return std::bit_cast<std::uint32_t>(x); }

// Whether two results are the same: the same bits, or both NaN (payloads are not promised).
bool same(float x, float y) { return std::isnan(x) ? std::isnan(y) : float_bits(x) == float_bits(y); }

// γ(n) = n·u / (1 − n·u), u = 2^-24: the relative bound of a chain of n roundings.
double chain_bound(i64 n) {
  const double nu = static_cast<double>(n) * 0x1p-24;
  return nu / (1 - nu);
}

struct product {
  bool ta, tb;
  i64 m, n, k;
  float alpha, beta;
};

// Operands of a product stored with padded leading dimensions, and C before and after.
struct operands {
  i64 lda, ldb, ldc;
  std::vector<float> a, b, c0, c;
};

operands make(const product& p, unsigned seed, bool nan_in_c = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  operands o;
  const i64 a_rows = p.ta ? p.k : p.m, a_cols = p.ta ? p.m : p.k;
  const i64 b_rows = p.tb ? p.n : p.k, b_cols = p.tb ? p.k : p.n;
  o.lda = a_cols + 3;
  o.ldb = b_cols + 5;
  o.ldc = p.n + 7;
  o.a.resize(static_cast<std::size_t>(a_rows * o.lda));
  o.b.resize(static_cast<std::size_t>(b_rows * o.ldb));
  o.c0.resize(static_cast<std::size_t>(p.m * o.ldc));
  for (auto& x : o.a) x = u(rng);
  for (auto& x : o.b) x = u(rng);
  for (auto& x : o.c0) x = nan_in_c ? std::numeric_limits<float>::quiet_NaN() : u(rng);
  o.c = o.c0;
  return o;
}

float op_a(const product& p, const operands& o, i64 i, i64 q) { return p.ta ? o.a[q * o.lda + i] : o.a[i * o.lda + q]; }
float op_b(const product& p, const operands& o, i64 q, i64 j) { return p.tb ? o.b[j * o.ldb + q] : o.b[q * o.ldb + j]; }
float rounded(float x) { return ops::from_bf16(ops::to_bf16(x)); }

void run(const product& p, operands& o) {
  ops::bgemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, o.a.data(), o.lda, o.b.data(), o.ldb, p.beta, o.c.data(), o.ldc);
}

// The largest error of o.c against the double-precision product, in units of its bound:
// against the rounded operands, γ(K + 2) · (|alpha| · Σ|Â B̂| + |beta · C|) plus the flushes;
// against the float operands, that plus (2^-7 + 2^-16) · |alpha| · Σ|A B| (bf16 keeps 8
// significant bits: within 2^-8 of the float, relatively). Over 1 fails, and so
// does a padding element of C that changed (or any NaN).
double worst_ratio(const product& p, const operands& o, bool against_float) {
  double worst = 0;
  for (i64 i = 0; i < p.m; ++i) {
    for (i64 j = 0; j < p.n; ++j) {
      double sum = 0, mag = 0, mag_float = 0;
      for (i64 q = 0; q < p.k; ++q) {
        const double x = op_a(p, o, i, q), y = op_b(p, o, q, j);
        const double xr = rounded(static_cast<float>(x)), yr = rounded(static_cast<float>(y));
        sum += against_float ? x * y : xr * yr;
        mag += std::fabs(xr * yr);
        mag_float += std::fabs(x * y);
      }
      const double old = p.beta == 0.f ? 0.0 : double(p.beta) * o.c0[i * o.ldc + j];
      const double want = double(p.alpha) * sum + old;
      const double alpha = std::fabs(double(p.alpha));
      double bound = chain_bound(p.k + 2) * (alpha * mag + std::fabs(old)) + alpha * double(p.k) * 0x1p-126;
      if (against_float) bound += (0x1p-7 + 0x1p-16) * alpha * mag_float;
      const double ratio = std::fabs(double(o.c[i * o.ldc + j]) - want) / (bound + 1e-300);
      if (!std::isfinite(ratio)) return 1e30;  // NaN compares false: never let it pass as small
      worst = std::max(worst, ratio);
    }
    for (i64 j = p.n; j < o.ldc; ++j)  // the padding of each row of C is left alone
      if (!same(o.c[i * o.ldc + j], o.c0[i * o.ldc + j])) return 1e30;
  }
  return worst;
}

unsigned seed_of(const product& p) { return static_cast<unsigned>(p.m * 131 + p.n * 17 + p.k * 7 + p.ta * 3 + p.tb); }

// Whether bgemm runs the AVX512_BF16 kernel on this CPU; if not, says that the calling case has
// nothing to compare (bgemm is the portable loop).
bool kernel_runs() {
  if (ops::bgemm_takes(false, false, 1, 1, 1)) return true;
  WARN("no AVX512_BF16 on this CPU: bgemm is the portable loop, this case compares it with itself");
  return false;
}

// A value for the extreme-value comparisons: mostly ordinary numbers, some whose products fall
// near or below 2^-126 (flushed), some whose products overflow, float denormals, signed zeros, and
// when `specials` infinities and NaNs.
float extreme(std::mt19937& rng, bool specials) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_int_distribution<int> pick(0, 99), scale(-8, 8);
  const int kind = pick(rng);
  if (kind < 40) return u(rng);
  if (kind < 60) return std::ldexp(u(rng), -63 + scale(rng));  // products about 2^-126
  if (kind < 70) return std::ldexp(u(rng), 64 + scale(rng) / 2);  // products about 2^128
  if (kind < 78) return bits_float(rng() & 0x807F'FFFFu);  // float denormals
  if (kind < 84) return kind % 2 ? 0.f : -0.f;
  if (kind < 92) return std::ldexp(u(rng), -120 + scale(rng));  // bf16 denormals after rounding, some
  if (!specials) return u(rng);
  if (kind < 96) return kind % 2 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  return bits_float(0x7F80'0000u | (rng() & 0x807F'FFFFu) | 1u);  // NaNs, quiet and signalling
}

}  // namespace

TEST_CASE("float to bf16 rounds to nearest with ties to even, overflows to infinity, and keeps NaNs NaN") {
  struct expect {
    std::uint32_t in;
    std::uint16_t out;
  };
  const expect cases[] = {
      {0x3F80'0000u, 0x3F80u},  // 1: exact
      {0x3F80'8000u, 0x3F80u},  // 1 + 2^-8: a tie, down to the even 1
      {0x3F81'8000u, 0x3F82u},  // 1 + 3·2^-8: a tie, up to the even 1 + 2^-6
      {0x3F80'8001u, 0x3F81u},  // just above a tie: up
      {0x3F81'7FFFu, 0x3F81u},  // just below a tie: down
      {0xBF80'8000u, 0xBF80u},  // the same ties, negative
      {0xBF81'8000u, 0xBF82u},
      {0x0000'0000u, 0x0000u},  // +0
      {0x8000'0000u, 0x8000u},  // −0 stays −0
      {0x7F7F'0000u, 0x7F7Fu},  // bf16's largest finite value
      {0x7F7F'7FFFu, 0x7F7Fu},  // below half an ulp above it: stays finite
      {0x7F7F'8000u, 0x7F80u},  // half an ulp above it (a tie, to the even "1.0·2^128"): +inf
      {0x7F7F'FFFFu, 0x7F80u},  // float's largest: +inf
      {0xFF7F'FFFFu, 0xFF80u},  // and its negative: −inf
      {0x7F80'0000u, 0x7F80u},  // infinities stay
      {0xFF80'0000u, 0xFF80u},
      {0x7FC0'0000u, 0x7FC0u},  // a quiet NaN
      {0x7F80'0001u, 0x7FC0u},  // a signalling NaN whose payload is all in the lower half: quieted, not inf
      {0xFFA1'2345u, 0xFFE1u},  // sign and upper payload kept, quiet bit set
      {0x7FFF'FFFFu, 0x7FFFu},  // a NaN that rounding up would carry into the sign
      {0x0000'0001u, 0x0000u},  // float denormals: the smallest rounds to +0
      {0x0000'8000u, 0x0000u},  // a tie, down to the even 0
      {0x0001'8000u, 0x0002u},  // a tie, up to the even bf16 denormal 2
      {0x0001'0000u, 0x0001u},  // bf16's smallest denormal: exact
      {0x8000'8001u, 0x8001u},  // negative, above a tie
      {0x007F'FFFFu, 0x0080u},  // float's largest denormal rounds up to the smallest normal
      {0x0080'0000u, 0x0080u},  // the smallest normal
  };
  for (const expect& e : cases) {
    INFO("float bits " << std::hex << e.in);
    CHECK(ops::to_bf16(bits_float(e.in)) == e.out);
    const float x = bits_float(e.in);
    std::uint16_t v = 0;
    ops::to_bf16(&x, &v, 1);  // the row conversion agrees
    CHECK(v == e.out);
  }
  // every bf16 survives the round trip; NaNs come back quiet
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const auto x = static_cast<std::uint16_t>(h);
    const bool nan = (h & 0x7FFFu) > 0x7F80u;
    if (ops::to_bf16(ops::from_bf16(x)) != (nan ? (x | 0x0040u) : x)) FAIL("bf16 bits " << std::hex << h);
    if (nan != std::isnan(ops::from_bf16(x))) FAIL("bf16 bits " << std::hex << h);
  }
}

TEST_CASE("the row conversions give the scalar conversion's bits for every length and any float") {
  std::mt19937 rng(11);
  for (i64 n : {1, 7, 15, 16, 17, 31, 32, 33, 100, 1000}) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (auto& v : x) v = bits_float(static_cast<std::uint32_t>(rng()));  // every class: NaNs, denormals, ...
    std::vector<std::uint16_t> h(static_cast<std::size_t>(n + 1), 0xABCDu);
    ops::to_bf16(x.data(), h.data(), n);
    std::vector<float> back(static_cast<std::size_t>(n));
    ops::from_bf16(h.data(), back.data(), n);
    INFO("n " << n);
    for (i64 i = 0; i < n; ++i) {
      CHECK(h[i] == ops::to_bf16(x[i]));
      CHECK(float_bits(back[i]) == static_cast<std::uint32_t>(h[i]) << 16);
    }
    CHECK(h[n] == 0xABCDu);  // nothing past n
  }
}

TEST_CASE("bgemm matches the double-precision product of the bf16-rounded operands within the chain's bound") {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (i64 m : {1, 7, 8, 9, 15, 17, 33, 100})
        for (i64 n : {1, 15, 16, 17, 33, 100})
          for (i64 k : {1, 2, 15, 17, 33, 64, 100, 301}) {
            const product p{ta, tb, m, n, k, 1.f, 0.f};
            operands o = make(p, seed_of(p));
            run(p, o);
            INFO("ta " << ta << " tb " << tb << " m " << m << " n " << n << " k " << k);
            CHECK(worst_ratio(p, o, false) <= 1.0);
            CHECK(worst_ratio(p, o, true) <= 1.0);
          }
}

TEST_CASE("bgemm is within bf16's rounding of the float product, and not closer than bf16 allows by chance") {
  // the operands really are rounded: against the float product the error is of bf16's size
  // (up to 2^-8 relative per operand), far above float's
  const product p{false, true, 64, 64, 256, 1.f, 0.f};
  operands o = make(p, 5);
  run(p, o);
  CHECK(worst_ratio(p, o, true) <= 1.0);
  double worst = 0;
  for (i64 i = 0; i < p.m; ++i)
    for (i64 j = 0; j < p.n; ++j) {
      double sum = 0, mag = 0;
      for (i64 q = 0; q < p.k; ++q) {
        sum += double(op_a(p, o, i, q)) * op_b(p, o, q, j);
        mag += std::fabs(double(op_a(p, o, i, q)) * op_b(p, o, q, j));
      }
      worst = std::max(worst, std::fabs(o.c[i * o.ldc + j] - sum) / mag);
    }
  CHECK(worst > 0x1p-14);
  CHECK(worst < 0x1p-7);
}

TEST_CASE("bgemm scales by alpha, adds beta times C, and does not read C when beta is 0") {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& [alpha, beta] : {std::pair{0.125f, 1.f}, {-2.f, 0.5f}, {1.f, 0.f}, {0.75f, -1.f}})
        for (i64 m : {1, 13})
          for (i64 n : {5, 32, 47}) {
            const product p{ta, tb, m, n, 45, alpha, beta};
            INFO("ta " << ta << " tb " << tb << " alpha " << alpha << " beta " << beta << " m " << m << " n " << n);
            operands o = make(p, seed_of(p));
            run(p, o);
            CHECK(worst_ratio(p, o, false) <= 1.0);
            if (beta == 0.f) {  // NaN in C must not leak in
              operands with_nan = make(p, seed_of(p), true);
              run(p, with_nan);
              CHECK(worst_ratio(p, with_nan, false) <= 1.0);
            }
          }
  // K = 0: C = beta · C (no products); M or N = 0: nothing
  for (bool portable : {false, true}) {
    std::vector<float> c{1.f, 2.f}, none;
    const float x = 3.f;
    if (portable) ops::bgemm_portable(false, false, 1, 2, 0, 1.f, &x, 1, &x, 2, 0.5f, c.data(), 2);
    else ops::bgemm(false, false, 1, 2, 0, 1.f, &x, 1, &x, 2, 0.5f, c.data(), 2);
    CHECK(c == std::vector<float>{0.5f, 1.f});
    ops::bgemm(false, false, 0, 2, 4, 1.f, &x, 4, &x, 2, 0.f, none.data(), 2);
    ops::bgemm(false, false, 1, 0, 4, 1.f, &x, 4, &x, 2, 0.f, none.data(), 2);
  }
}

TEST_CASE("each element is summed in pairs of k, the odd k first, denormals read as zero and sums flushed below 2^-126") {
  for (bool portable : {false, true}) {
    auto product1 = [&](std::vector<float> a, std::vector<float> b) {
      float c = 0.f;
      const i64 k = static_cast<i64>(a.size());
      if (portable) ops::bgemm_portable(false, false, 1, 1, k, 1.f, a.data(), k, b.data(), 1, 0.f, &c, 1);
      else ops::bgemm(false, false, 1, 1, k, 1.f, a.data(), k, b.data(), 1, 0.f, &c, 1);
      return c;
    };
    INFO("portable " << portable);
    // products 0, 2^-24, 2^-24, 1: in pairs, odd k first, s = 2^-24, 2^-24, 1 + 2^-24 → 1 (a tie,
    // to even), 1; in the order of k it would be 1 + 2^-23
    CHECK(product1({0.f, 0x1p-24f, 0x1p-24f, 1.f}, {1.f, 1.f, 1.f, 1.f}) == 1.f);
    // 2^-126 − 2^-151·(1 + 2^-7): to 24 bits (unbounded exponent) just below 2^-126, so flushed
    // to +0 (rounded on float's denormal grid instead it would be 2^-126)
    CHECK(float_bits(product1({-0x1p-75f, 0x1p-63f}, {0x1.02p-76f, 0x1p-63f})) == 0u);
    // a product below 2^-126 is flushed, keeping its sign; a bf16 denormal operand counts as zero
    // (2^-130 · 2^10 would be the normal 2^-120)
    CHECK(float_bits(product1({-0x1p-70f}, {0x1p-70f})) == 0x8000'0000u);
    CHECK(float_bits(product1({0x1p10f}, {0x1p-130f})) == 0u);
    // a float denormal operand counts as zero too, even the largest, which to_bf16 rounds up to
    // the normal 2^-126
    CHECK(ops::to_bf16(bits_float(0x007F'FFFFu)) == 0x0080u);
    CHECK(float_bits(product1({0x1p10f}, {bits_float(0x007F'FFFFu)})) == 0u);
    // and keeps its sign: k = 1 flushes −2^-130 to −0, then k = 0 adds 2^10 · (−0) = −0
    CHECK(float_bits(product1({0x1p10f, -0x1p-60f}, {bits_float(0x807F'FFFFu), 0x1p-70f})) == 0x8000'0000u);
    // an odd K's last pair ends in a zero: 3 · 5 + 7 · 11 + 2 · 13 exactly
    CHECK(product1({3.f, 7.f, 2.f}, {5.f, 11.f, 13.f}) == 118.f);
    // the operands are rounded to bf16: 1 + 2^-8 is a tie, down to 1
    CHECK(product1({1.f + 0x1p-8f}, {1.f}) == 1.f);
  }
}

TEST_CASE("the AVX512_BF16 kernel and the portable loop give the same bits, extreme values included") {
  if (!kernel_runs()) return;
  for (bool specials : {false, true})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (i64 m : {1, 9, 17, 40})
          for (i64 n : {1, 16, 17, 33, 70})
            for (i64 k : {1, 2, 3, 31, 32, 33, 129}) {
              const product p{ta, tb, m, n, k, m % 2 ? 1.f : -0.375f, n % 2 ? 0.f : 1.5f};
              operands o = make(p, seed_of(p));
              std::mt19937 rng(seed_of(p) + specials);
              for (auto& x : o.a) x = extreme(rng, specials);
              for (auto& x : o.b) x = extreme(rng, specials);
              std::vector<float> portable = o.c0;
              run(p, o);
              ops::bgemm_portable(p.ta, p.tb, p.m, p.n, p.k, p.alpha, o.a.data(), o.lda, o.b.data(), o.ldb, p.beta,
                                  portable.data(), o.ldc);
              INFO("specials " << specials << " ta " << ta << " tb " << tb << " m " << m << " n " << n << " k " << k);
              i64 differ = 0;
              for (std::size_t e = 0; e < portable.size(); ++e) differ += !same(o.c[e], portable[e]);
              CHECK(differ == 0);
            }
}

TEST_CASE("every element of a bf16 product has the same bits however the rows or the columns are split") {
  std::mt19937 rng(3);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const product p{ta, tb, 45, 70, 99, 1.f, 0.f};
      operands o = make(p, 17);
      for (auto& x : o.a) x = extreme(rng, false);
      run(p, o);
      INFO("ta " << ta << " tb " << tb);
      for (i64 split : {1, 5, 8, 20, 44}) {  // rows [0, split), then [split, M)
        std::vector<float> c = o.c0;
        const float* a_rest = ta ? o.a.data() + split : o.a.data() + split * o.lda;
        ops::bgemm(ta, tb, split, p.n, p.k, 1.f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f, c.data(), o.ldc);
        ops::bgemm(ta, tb, p.m - split, p.n, p.k, 1.f, a_rest, o.lda, o.b.data(), o.ldb, 0.f, c.data() + split * o.ldc,
                   o.ldc);
        INFO("rows split at " << split);
        CHECK(std::memcmp(c.data(), o.c.data(), c.size() * sizeof(float)) == 0);
      }
      for (i64 split : {1, 16, 33}) {  // columns [0, split), then [split, N)
        std::vector<float> c = o.c0;
        const float* b_rest = tb ? o.b.data() + split * o.ldb : o.b.data() + split;
        ops::bgemm(ta, tb, p.m, split, p.k, 1.f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f, c.data(), o.ldc);
        ops::bgemm(ta, tb, p.m, p.n - split, p.k, 1.f, o.a.data(), o.lda, b_rest, o.ldb, 0.f, c.data() + split, o.ldc);
        INFO("columns split at " << split);
        CHECK(std::memcmp(c.data(), o.c.data(), c.size() * sizeof(float)) == 0);
      }
    }
}

TEST_CASE("bgemm with op(B) or op(A) packed once gives bgemm's bits, whole or in row chunks and column blocks, and "
          "its epilogue a pass's") {
  struct size3 {
    i64 m, n, k;
  };
  std::vector<size3> sizes;
  for (i64 m : {1, 9, 33, 70})
    for (i64 n : {1, 16, 17, 33, 100})
      for (i64 k : {1, 15, 64, 101}) sizes.push_back({m, n, k});
  sizes.push_back({300, 300, 701});  // packed by several tasks (blocks of rows, pairs or panels), K odd
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& [m, n, k] : sizes)
            for (const auto& [alpha, beta] : {std::pair{1.f, 0.f}, {-0.5f, 1.f}}) {
              const product p{ta, tb, m, n, k, alpha, beta};
              INFO("ta " << ta << " tb " << tb << " m " << m << " n " << n << " k " << k << " beta " << beta);
              operands want = make(p, seed_of(p)), by_b = want, by_a = want;
              run(p, want);
              // op(B) packed, the rows in chunks of 8 (the last one ragged)
              const ops::bgemm_packed_b pb(tb, n, k, by_b.b.data(), by_b.ldb);
              CHECK((pb.count() == n && pb.k() == k));
              for (i64 r0 = 0; r0 < m; r0 += 8) {
                const float* a = ta ? by_b.a.data() + r0 : by_b.a.data() + r0 * by_b.lda;
                ops::bgemm(ta, std::min<i64>(8, m - r0), alpha, a, by_b.lda, pb, beta, by_b.c.data() + r0 * by_b.ldc,
                           by_b.ldc);
              }
              // op(A) packed, the columns in blocks of 32 (the last one ragged)
              const ops::bgemm_packed_a pa(ta, m, k, by_a.a.data(), by_a.lda);
              CHECK((pa.count() == m && pa.k() == k));
              for (i64 j0 = 0; j0 < n; j0 += 32) {
                const float* b = tb ? by_a.b.data() + j0 * by_a.ldb : by_a.b.data() + j0;
                ops::bgemm(pa, tb, std::min<i64>(32, n - j0), alpha, b, by_a.ldb, beta, by_a.c.data() + j0, by_a.ldc);
              }
              bool b_same = true, a_same = true;
              for (std::size_t e = 0; e < want.c.size(); ++e) {
                b_same = b_same && same(by_b.c[e], want.c[e]);
                a_same = a_same && same(by_a.c[e], want.c[e]);
              }
              CHECK(b_same);
              CHECK(a_same);
            }
  // the epilogue (bias, relu, residual) in the tiles: the product's bits, then the same
  // operations as a pass over C; with K = 0 (nothing packed) the pass itself
  for (i64 k : {0, 1, 64, 101})
    for (const auto& [relu, with_residual] : {std::pair{false, false}, {true, false}, {false, true}}) {
      const i64 m = 37, n = 45;
      const product p{false, true, m, n, std::max<i64>(k, 1), 1.f, 0.f};
      operands want = make(p, seed_of(p)), got = want;
      std::mt19937 rng(static_cast<unsigned>(k + 3 * relu + 5 * with_residual));
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      std::vector<float> bias(static_cast<std::size_t>(n)), residual(static_cast<std::size_t>(m * 50));
      for (auto& v : bias) v = u(rng);
      for (auto& v : residual) v = u(rng);
      // columns where y + bias is NaN, −inf and +inf: relu keeps a NaN NaN (as std::max(y, 0.f))
      bias[3] = std::numeric_limits<float>::quiet_NaN();
      bias[5] = -std::numeric_limits<float>::infinity();
      bias[7] = std::numeric_limits<float>::infinity();
      ops::bgemm(false, true, m, n, k, 1.f, want.a.data(), want.lda, want.b.data(), want.ldb, 0.f, want.c.data(),
                 want.ldc);
      for (i64 i = 0; i < m; ++i)
        for (i64 j = 0; j < n; ++j) {
          float& y = want.c[i * want.ldc + j];
          y = y + bias[j];
          if (relu) y = std::max(y, 0.f);
          if (with_residual) y = y + residual[i * 50 + j];
        }
      const ops::bgemm_packed_b pb(true, n, k, got.b.data(), got.ldb);
      ops::bgemm(false, m, 1.f, got.a.data(), got.lda, pb, 0.f, got.c.data(), got.ldc,
                 ops::gemm_epilogue{bias.data(), relu, with_residual ? residual.data() : nullptr, 50});
      bool all_same = true;
      for (std::size_t e = 0; e < want.c.size(); ++e) all_same = all_same && same(got.c[e], want.c[e]);
      INFO("k " << k << " relu " << relu << " residual " << with_residual);
      CHECK(all_same);
    }
  // degenerate sizes: nothing packed, nothing written (M or N = 0), C = beta · C (K = 0)
  std::vector<float> c{1.f, 2.f};
  const float x = 3.f;
  const ops::bgemm_packed_b none_b(false, 2, 0, &x, 2);
  ops::bgemm(false, 1, 1.f, &x, 1, none_b, 0.5f, c.data(), 2);
  CHECK(c == std::vector<float>{0.5f, 1.f});
  ops::bgemm(false, 0, 1.f, &x, 1, none_b, 0.5f, c.data(), 2);
  const ops::bgemm_packed_a none_a(false, 0, 4, &x, 4);
  ops::bgemm(none_a, false, 2, 1.f, &x, 2, 0.f, c.data(), 2);
  CHECK(c == std::vector<float>{0.5f, 1.f});
}
