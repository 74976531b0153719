// Fused attention: the small-block kernels — every key in one block, L query rows per vector
// (small_lanes: 16 with AVX-512, else 8).
// Private to ops/attention.cpp, which alone includes it (one translation unit: the kernels
// stay out of every other file).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "attention_blocked.hpp"

namespace loom::ops {
namespace fused_attention {  // named, not anonymous: the kernels' lambdas capture these types

// ---------------------------------------------------------------- small blocks
//
// When every key fits in one block (keys ≤ small_keys), the path above spends most of its time
// outside its products: per query row it masks, takes a max, exponentiates and sums rows as
// short as 16 keys, and every product of a few thousand multiply-adds is a GEMM call of its own
// (the tiny model: heads of 16, sequences of 16 — 20% of its training step went there). Here
// L query rows are one vector: the scores and weights are kept transposed, st[j · L + i] for
// key j and row i, so the masks, the max, the exponentials and the sums run down the keys with
// the whole block of rows in each vector operation; the products keep their sums in vectors of
// L columns. All keys are one block, so no online
// rescaling is needed: p = e^(s − max) / l directly. Same math and saved lse as above.

// At most this many keys: small_keys in the forward, small_backward_keys in the backward.
// Measured [AMD EPYC Zen 4]: both faster than the blocked kernels with 16 and 32 keys (heads of
// 16). With 64 keys and heads of 32 (the small model: one process switching the path every two
// training steps) the forward ran in 0.76× the blocked kernels' time and the backward in 1.13×
// (1.01× with eight sums in flight; under a causal mask 0.80–0.83×, hence small_backward_path);
// with 128 keys and heads of 32 (bench_vs_torch's MHA B8 T128) the forward in 0.92×; with 1024
// keys and heads of 64 in 1.07× (design-notes has the figures).
// So a forward here may be followed by the blocked backward: both read the same saved lse (the
// row's max + log of its sum), so either backward follows either forward.
constexpr std::int64_t small_keys = 128;
constexpr std::int64_t small_backward_keys = 32;

bool blocked_forced();  // attention_force_blocked (fused_attention.hpp); defined in ops/attention.cpp

/// Whether the small-block kernels take this problem's forward: every key in one block, more
/// than one query row (decoding's one row keeps the path above), no dropout, the blocked kernels
/// not forced. They multiply in float even when the products are bf16 (op_args::bf16), where the
/// blocked kernels round to bf16; so with bf16 products they take only what their backward takes
/// too (a float forward's lse would not match the weights a bf16 backward recomputes: gradients
/// off by 25% and more).
template <class T>
bool small_path(const problem<T>& pr) {
  return !blocked_forced() && pr.keys <= (pr.bf16 ? small_backward_keys : small_keys) && pr.rows >= 2 && !pr.drop;
}

/// Whether they take its backward: as small_path, with at most small_backward_keys keys; or
/// with a causal mask over no more keys than query rows, as many as the forward takes: each
/// block of L rows then sees only the keys up to its last row (with 64 keys, 160 of the 256
/// that a block of all 64 rows sees), which the blocked kernels compute and mask.
template <class T>
bool small_backward_path(const problem<T>& pr) {
  return small_path(pr) && (pr.keys <= small_backward_keys || (pr.masks.causal && pr.keys <= pr.rows));
}

/// Query rows per block of the small-block kernels, one per lane of their vectors: 16 (64-byte
/// vectors, one zmm) where the CPU runs the AVX-512 clones (wide_vectors), else 8 (32 bytes, one
/// ymm). GCC 12 keeps a 64-byte vector in memory without AVX-512: with 16 rows on AMD EPYC
/// family 25 model 1 (Zen 3, AVX2) these kernels were 40% of the tiny training step. Every lane
/// is computed alone, in the same order for any L, so the output and dq are the same bits with
/// either; dk and dv add one sum per block of rows, so they differ by rounding (tests force
/// either: attention_force_small_lanes, fused_attention.hpp). Defined in ops/attention.cpp.
int small_lanes();

/// One stage of an L × L transpose in registers: rows i and i + B (bit B of i clear) swap the
/// elements whose column has bit B set in one and clear in the other — (i, e) ↔ (i ^ B, e ^ B)
/// when bit B of i and of e differ. The stages B = L/2, …, 2, 1 swap every bit of the row with
/// the same bit of the column: the transpose. Each pair is two two-source shuffles (one
/// vpermt2ps each with AVX-512).
template <class T, int L, int B>
[[gnu::always_inline]] inline void transpose_stage(lvec<T, L>* r) {
  using E_t = typename lane_index<T>::elem;
  using I = gcc_vector<E_t, L * sizeof(E_t)>;
  constexpr auto masks = []<std::size_t... E>(std::index_sequence<E...>) {
    // row i takes its own element e, or row i + B's e − B; row i + B: its own e, or row i's e + B
    return std::pair{I{static_cast<E_t>((E & B) ? L + E - B : E)...}, I{static_cast<E_t>((E & B) ? L + E : E + B)...}};
  }(std::make_index_sequence<L>{});
#pragma GCC unroll 16
  for (int i = 0; i < L; ++i)
    if (!(i & B)) {
      const lvec<T, L> a = r[i], b = r[i + B];
      r[i] = __builtin_shuffle(a, b, masks.first);
      r[i + B] = __builtin_shuffle(a, b, masks.second);
    }
}

/// xt[c · S + i] = column c of row r0 + i of x's entry n, for i < nr; zero in the lanes past nr
/// (S = L, or B · L when the block is one of B side by side: the lanes [0, L) of each S).
/// Blocks of L columns are transposed in registers and stored as whole vectors, so that the
/// products' vector loads of xt can take them from the stores (the element-wise stores of a
/// plain transposing loop cannot be forwarded to a vector load, which then waits for all L to
/// reach the cache: that wait was a fifth of the small backward's time); columns past the last
/// whole block, element by element.
template <class T, int L, int S = L>
[[gnu::always_inline]] inline void load_transposed(const operand<const T>& x, std::int64_t n, std::int64_t r0, int nr,
                                                   T* xt) {
  static_assert(L == 8 || L == 16);
  const T* x0 = x.at(n, r0);
  const std::int64_t ld = x.ld;
  std::int64_t c0 = 0;
  for (; c0 + L <= x.cols; c0 += L) {
    lvec<T, L> r[L];
#pragma GCC unroll 16
    for (int i = 0; i < L; ++i) r[i] = i < nr ? load<L>(x0 + i * ld + c0) : lvec<T, L>{};
    if constexpr (L == 16) transpose_stage<T, L, 8>(r);
    transpose_stage<T, L, 4>(r);
    transpose_stage<T, L, 2>(r);
    transpose_stage<T, L, 1>(r);
#pragma GCC unroll 16
    for (int e = 0; e < L; ++e) store(xt + (c0 + e) * S, r[e]);
  }
  if (c0 == x.cols) return;
  for (std::int64_t c = c0; c < x.cols; ++c) store(xt + c * S, lvec<T, L>{});
  for (int i = 0; i < nr; ++i)
    for (std::int64_t c = c0; c < x.cols; ++c) xt[c * S + i] = x0[i * ld + c];
}

/// out[(j + g) · S + (0, S)] = scale · Σ_c a[(j + g) · lda + c] · xt[c · S + (0, S)], g < G, S =
/// B · L: G rows of a times the transposed block xt, the block's rows in B vectors, G · B sums in
/// flight together (each broadcast element of a feeds B of them).
template <int G, class T, int L, int B = 1>
[[gnu::always_inline]] inline void rows_times(const T* aj, std::int64_t lda, std::int64_t cols, const T* xt, T scale,
                                              T* out) {
  using V = lvec<T, L>;
  constexpr int S = B * L;
  V acc[G][B] = {};
  for (std::int64_t c = 0; c < cols; ++c) {
    V x[B];
#pragma GCC unroll 2
    for (int v = 0; v < B; ++v) x[v] = load<L>(xt + c * S + v * L);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const T ag = aj[g * lda + c];
#pragma GCC unroll 2
      for (int v = 0; v < B; ++v) acc[g][v] += ag * x[v];
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 2
    for (int v = 0; v < B; ++v) store(out + g * S + v * L, acc[g][v] * scale);
}

/// out[j · L + (0, L)] = scale · Σ_c a[j · lda + c] · xt[c · L + (0, L)], j < w: rows of a times
/// the transposed block xt, eight rows of a at a time, then four, then one. Each sum is one chain
/// over c in order, whatever the grouping. Eight sums in flight rather than four: the products
/// of 64 keys ran in 0.94× the time (design-notes), the 16 keys of the tiny model's heads alike.
template <class T, int L, int B = 1>
[[gnu::always_inline]] inline void rows_times_block(const T* a, std::int64_t lda, std::int64_t w, std::int64_t cols,
                                                    const T* xt, T scale, T* out) {
  constexpr int S = B * L;
  std::int64_t j = 0;
  for (; j + 8 <= w; j += 8) rows_times<8, T, L, B>(a + j * lda, lda, cols, xt, scale, out + j * S);
  for (; j + 4 <= w; j += 4) rows_times<4, T, L, B>(a + j * lda, lda, cols, xt, scale, out + j * S);
  for (; j < w; ++j) rows_times<1, T, L, B>(a + j * lda, lda, cols, xt, scale, out + j * S);
}

/// R outputs y_r = y + r · ldy (r < R), each y_r[0, n) = (add ? y_r : 0) + scale[r · ss] · Σ_{t < m}
/// a[r · ar + t · as] · x[t · ldx + (0, n)]: combinations of the same m rows of x, C · L columns at
/// a time (then L, then one), the R · C sums in flight together (ss = 0: one scale for all). Each
/// element is one chain of multiply-adds over t in order, whatever L and C. C = 2 where R = 4
/// leaves the two FMA pipes short of independent sums (four chains of a 4-cycle FMA fill one of
/// them): forward_small, heads of 32 or more.
template <int R, int L, int C, class T>
[[gnu::always_inline]] inline void combine_rows(T* y, std::int64_t ldy, bool add, const T* scale, std::int64_t ss,
                                                const T* a, std::int64_t ar, std::int64_t as, std::int64_t m,
                                                const T* x, std::int64_t ldx, std::int64_t n) {
  using V = lvec<T, L>;
  std::int64_t c0 = 0;
  auto columns = [&]<int W>() {  // columns [c0, c0 + W · L)
    V acc[R][W] = {};
    for (std::int64_t t = 0; t < m; ++t) {
      V xr[W];
#pragma GCC unroll 2
      for (int v = 0; v < W; ++v) xr[v] = load<L>(x + t * ldx + c0 + v * L);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const T ar_t = a[r * ar + t * as];
#pragma GCC unroll 2
        for (int v = 0; v < W; ++v) acc[r][v] += ar_t * xr[v];
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int v = 0; v < W; ++v) {
        T* yr = y + r * ldy + c0 + v * L;
        store(yr, add ? load<L>(yr) + acc[r][v] * scale[r * ss] : acc[r][v] * scale[r * ss]);
      }
  };
  if constexpr (C > 1)
    for (; c0 + C * L <= n; c0 += C * L) columns.template operator()<C>();
  for (; c0 + L <= n; c0 += L) columns.template operator()<1>();
  for (; c0 < n; ++c0)
    for (int r = 0; r < R; ++r) {
      T acc = 0;
      for (std::int64_t t = 0; t < m; ++t) acc += a[r * ar + t * as] * x[t * ldx + c0];
      T& yr = y[r * ldy + c0];
      yr = add ? yr + scale[r * ss] * acc : scale[r * ss] * acc;
    }
}

/// combine_rows for `count` outputs, W at a time (8 or 4), then one by one; C column vectors
/// at a time (combine_rows).
template <int W, int L, int C = 1, class T>
[[gnu::always_inline]] inline void combine_all(std::int64_t count, T* y, std::int64_t ldy, bool add, const T* scale,
                                               std::int64_t ss, const T* a, std::int64_t ar, std::int64_t as,
                                               std::int64_t m, const T* x, std::int64_t ldx, std::int64_t n) {
  static_assert(W == 4 || W == 8);
  std::int64_t r = 0;
  for (; r + W <= count; r += W)
    combine_rows<W, L, C>(y + r * ldy, ldy, add, scale + r * ss, ss, a + r * ar, ar, as, m, x, ldx, n);
  for (; r < count; ++r)
    combine_rows<1, L, C>(y + r * ldy, ldy, add, scale + r * ss, ss, a + r * ar, ar, as, m, x, ldx, n);
}

/// The keys a block of query rows sees: [klo, klo + w), the union of its rows' key ranges (as
/// problem::key_span; w = 0 when no row sees any key).
struct key_window {
  std::int64_t klo = 0, w = 0;
};

/// The masked scores of rows [r0, r0 + nr) of entry n (nr ≤ B · L) against the keys the block
/// sees (returned), transposed into st ([w][B · L]; −∞ where a row may not look and in the lanes
/// past nr); qt receives the rows of q transposed ([d][B · L]).
template <class T, int L, int B = 1>
[[gnu::always_inline]] inline key_window small_scores(const problem<T>& pr, std::int64_t n, std::int64_t r0, int nr,
                                                      T* qt, T* st) {
  constexpr int S = B * L;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  std::int64_t first[S], last[S];  // each row's keys [first, last), one masks.range call per row
  std::int64_t klo = pr.keys, khi = 0;
  for (int i = 0; i < nr; ++i) {
    std::tie(first[i], last[i]) = pr.masks.range(n, r0 + i);
    if (first[i] < last[i]) {
      klo = std::min(klo, first[i]);
      khi = std::max(khi, last[i]);
    }
  }
  const std::int64_t w = std::max<std::int64_t>(0, khi - klo);
#pragma GCC unroll 2
  for (int v = 0; v < B; ++v)
    load_transposed<T, L, S>(pr.q, n, r0 + v * L, std::clamp(nr - v * L, 0, L), qt + v * L);
  rows_times_block<T, L, B>(pr.k.at(n, klo), pr.k.ld, w, pr.d, qt, static_cast<T>(pr.p->scale), st);
  // the keys each row may see, relative to klo (none in the lanes past nr); a plain loop over
  // the lanes, which GCC vectorises well (its lowering of a generic-vector select on two integer
  // compares was scalar code, 10× slower)
  std::int32_t lo[S] = {}, hi[S] = {};
  for (int i = 0; i < nr; ++i) {
    lo[i] = static_cast<std::int32_t>(std::clamp<std::int64_t>(first[i] - klo, 0, w));
    hi[i] = static_cast<std::int32_t>(std::clamp<std::int64_t>(last[i] - klo, lo[i], w));
  }
  for (std::int32_t j = 0; j < static_cast<std::int32_t>(w); ++j) {
    T* sj = st + j * S;
    for (int i = 0; i < S; ++i) sj[i] = (j >= lo[i]) & (j < hi[i]) ? sj[i] : neg_inf;
  }
  if (!pr.masks.allowed.empty() || !pr.masks.added.empty()) {
    T row[small_keys];  // boolean and float masks, one row at a time
    for (int i = 0; i < nr; ++i) {
      for (std::int64_t j = 0; j < w; ++j) row[j] = st[j * S + i];
      pr.masks.apply(n, r0 + i, klo, klo + w, row);
      for (std::int64_t j = 0; j < w; ++j) st[j * S + i] = row[j];
    }
  }
  return {klo, w};
}

// Rows [r0, r0 + nr) of entry n (nr ≤ B · L: B vectors of L rows side by side): o and the row lse.
// B = 2 (forward_kernel: 16 lanes and 32 rows or more) makes each broadcast element of K in the
// scores' product feed two FMAs (16 sums in flight): MHA B8 T128 (heads of 32) forward in 0.94–0.95×
// the time of B = 1, a B16 T64 d256 h8 forward (the small model's encoder) 0.96–0.97×, B8 T32 d64
// h4 0.96–0.97×; causal heads of 32 and 64 forward + backward unchanged (one process alternating
// the two, medians of 21 rounds, Intel Xeon family 6 model 207, 2026-12-08). Same bits (each
// element is the same chains; the union of the rows' key ranges adds only masked keys, e^(−∞) = 0).
// With 8 lanes (AVX2's 16 registers) B stays 1: 16 sums would not fit.
template <class T, int L, int B = 1>
LOOM_VECTOR_CLONES void forward_small(const problem<T>& pr, T* out, T* lse, std::int64_t n, std::int64_t r0, int nr) {
  using V = lvec<T, L>;
  constexpr int S = B * L;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  if (r0 + nr >= pr.rows && n + 1 < pr.N) {  // the next entry's operands (usually this thread's next item)
    prefetch_entry(pr.q, n + 1, std::min<std::int64_t>(pr.rows, S));
    prefetch_entry(pr.k, n + 1, pr.keys);
    prefetch_entry(pr.v, n + 1, pr.keys);
  }
  T* qt = scratch<T>(static_cast<std::size_t>((pr.d + pr.keys) * S));
  T* st = qt + pr.d * S;
  const auto [klo, w] = small_scores<T, L, B>(pr, n, r0, nr, qt, st);
  // the row maxima, in one vector per L rows (GCC made the plain loop over the lanes sixteen
  // scalar maxima per key; design-notes has the measurement)
  T mx[S], base[S];
  V m[B];
#pragma GCC unroll 2
  for (int v = 0; v < B; ++v) m[v] = V{} + neg_inf;
  for (std::int64_t j = 0; j < w; ++j)
#pragma GCC unroll 2
    for (int v = 0; v < B; ++v) {
      const V x = load<L>(st + j * S + v * L);
      m[v] = x > m[v] ? x : m[v];
    }
#pragma GCC unroll 2
  for (int v = 0; v < B; ++v) store(mx + v * L, m[v]);
  for (int i = 0; i < S; ++i) base[i] = mx[i] == neg_inf ? T(0) : mx[i];  // no key to see: e^(−∞) = 0
  V b[B], l[B];
#pragma GCC unroll 2
  for (int v = 0; v < B; ++v) {
    b[v] = load<L>(base + v * L);
    l[v] = V{};
  }
  for (std::int64_t j = 0; j < w; ++j)
#pragma GCC unroll 2
    for (int v = 0; v < B; ++v) {
      const V e = vexp_lanes<T, L>(load<L>(st + j * S + v * L) - b[v]);
      store(st + j * S + v * L, e);
      l[v] += e;
    }
  T sums[S];
#pragma GCC unroll 2
  for (int v = 0; v < B; ++v) store(sums + v * L, l[v]);
  T inv[S];
  for (int i = 0; i < nr; ++i) inv[i] = sums[i] > T(0) ? T(1) / sums[i] : T(0);
  if (lse) {
    T logs[S];
#pragma GCC unroll 2
    for (int v = 0; v < B; ++v) store(logs + v * L, vlog_lanes<T, L>(l[v]));
    for (int i = 0; i < nr; ++i) lse[n * pr.rows + r0 + i] = sums[i] > T(0) ? mx[i] + logs[i] : neg_inf;
  }
  // o[i] = Σ_j p[i, j] v[j] / l[i]
  // four outputs at a time: with eight, the tiny model's forward (16 keys, heads of 16) took 1.07×;
  // and two column vectors at a time where the heads have them (eight sums in flight): MHA B8 T128,
  // heads of 32, forward in 0.94× the time of one vector at a time (one process alternating the
  // two, medians of 21 rounds, Intel Xeon family 6 model 207, 2026-12-07); heads of 16 unchanged
  combine_all<4, L, 2>(nr, out + (pr.o.at(n, r0) - pr.o.base), pr.o.ld, false, inv, 1, st, 1, S, w, pr.v.at(n, klo),
                       pr.v.ld, pr.dv);
}

// Entry n's gradients (dq, dk, dv may each be null), added to; the weights recomputed from lse.
template <class T, int L>
LOOM_VECTOR_CLONES void backward_small(const problem<T>& pr, const operand<const T>& dout, const operand<T>& dq,
                                       const operand<T>& dk, const operand<T>& dvv, const T* lse, std::int64_t n) {
  using V = lvec<T, L>;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T one = 1, c = static_cast<T>(pr.p->scale);  // the products' scales
  const std::int64_t d = pr.d, dv = pr.dv;
  if (n + 1 < pr.N) {  // the next entry (usually the next this thread runs)
    for (const auto* x : {&pr.q, &pr.k, &pr.v, &dout}) prefetch_entry(*x, n + 1, x == &pr.k || x == &pr.v ? pr.keys : pr.rows);
    prefetch_entry(dq, n + 1, pr.rows);
    prefetch_entry(dk, n + 1, pr.keys);
    prefetch_entry(dvv, n + 1, pr.keys);
  }
  T* qt = scratch<T>(static_cast<std::size_t>((std::max(d, dv) + 2 * pr.keys) * L));
  T* pt = qt + std::max(d, dv) * L;  // the weights, transposed (qt later holds do transposed)
  T* ds = pt + pr.keys * L;          // dp, then ds, transposed
  for (std::int64_t r0 = 0; r0 < pr.rows; r0 += L) {
    const int nr = static_cast<int>(std::min<std::int64_t>(L, pr.rows - r0));
    const auto [klo, w] = small_scores<T, L>(pr, n, r0, nr, qt, pt);
    // p = e^(s − lse); a row with no key to see (lse = −∞) and the lanes past nr subtract +∞
    // instead, so that every weight is e^(−∞) = 0
    T base[L];
    for (int i = 0; i < L; ++i) {
      const T l = i < nr ? lse[n * pr.rows + r0 + i] : neg_inf;
      base[i] = l == neg_inf ? -neg_inf : l;
    }
    const V b = load<L>(base);
    for (std::int64_t j = 0; j < w; ++j) store(pt + j * L, vexp_lanes<T, L>(load<L>(pt + j * L) - b));
    if (dvv.base)  // dv[j] += Σ_i p[i, j] do[i]
      combine_all<8, L>(w, dvv.at(n, klo), dvv.ld, true, &one, 0, pt, L, 1, nr, dout.at(n, r0), dout.ld, dv);
    if (!dq.base && !dk.base) continue;
    load_transposed<T, L>(dout, n, r0, nr, qt);
    rows_times_block<T, L>(pr.v.at(n, klo), pr.v.ld, w, dv, qt, T(1), ds);  // dp = do vᵀ
    // D = rowsum(do ⊙ o) = Σ_j p ⊙ dp (o = Σ_j p[i, j] v[j]: every key is in this block and
    // there is no dropout here), from what is in the first level instead of o's rows
    V dsum{};
    for (std::int64_t j = 0; j < w; ++j) dsum += load<L>(pt + j * L) * load<L>(ds + j * L);
    for (std::int64_t j = 0; j < w; ++j)                                      // ds = p ⊙ (dp − D)
      store(ds + j * L, load<L>(pt + j * L) * (load<L>(ds + j * L) - dsum));
    if (dq.base)  // dq[i] += c · Σ_j ds[i, j] k[j]
      combine_all<8, L>(nr, dq.at(n, r0), dq.ld, true, &c, 0, ds, 1, L, w, pr.k.at(n, klo), pr.k.ld, d);
    if (dk.base)  // dk[j] += c · Σ_i ds[i, j] q[i]
      combine_all<8, L>(w, dk.at(n, klo), dk.ld, true, &c, 0, ds, L, 1, nr, pr.q.at(n, r0), pr.q.ld, d);
  }
}

}  // namespace fused_attention
}  // namespace loom::ops
