// Fused attention: the blocked kernels — online softmax over blocks of keys, products by GEMM.
// Private to ops/attention.cpp, which alone includes it (one translation unit: the kernels
// stay out of every other file).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "attention_lanes.hpp"
#include "blas.hpp"
#include "loom/core/parallel.hpp"

namespace loom::ops {
namespace fused_attention {  // named, not anonymous: the kernels' lambdas capture these types

// Rows [r0, r1) of entry n: the online softmax over key blocks, then o and the row lse.
template <class T>
LOOM_VECTOR_CLONES void forward_rows(const problem<T>& pr, T* out, T* lse, std::int64_t n, std::int64_t r0, std::int64_t r1) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const std::int64_t rows = r1 - r0, dv = pr.dv;
  T* s = scratch<T>(static_cast<std::size_t>(rows * (key_block + dv + 2)));
  T* acc = s + rows * key_block;
  T* m = acc + rows * dv;
  T* l = m + rows;
  std::fill(acc, acc + rows * dv, T(0));
  std::fill(m, m + rows, neg_inf);
  std::fill(l, l + rows, T(0));
  const auto [klo, khi] = pr.key_span(n, r0, r1);
  for (std::int64_t j0 = klo; j0 < khi; j0 += key_block) {
    const std::int64_t j1 = std::min(khi, j0 + key_block), w = j1 - j0;
    // s's rows are padded to whole vectors (−∞ past w, which e^ turns into +0) so that the max,
    // the exponentials and their sum run without a scalar tail
    const std::int64_t ws = (w + lanes - 1) / lanes * lanes;
    gemm<T>(false, true, rows, w, pr.d, static_cast<T>(pr.p->scale), pr.q.at(n, r0), pr.q.ld, pr.k.at(n, j0), pr.k.ld,
            T(0), s, ws, pr.bf16);
    for (std::int64_t ri = 0; ri < rows; ++ri) {
      T* row = s + ri * ws;
      pr.masks.apply(n, r0 + ri, j0, j1, row);
      std::fill(row + w, row + ws, neg_inf);
      const T mx = lane_max(row, ws);
      if (mx == neg_inf) {  // nothing to see in this block
        std::fill(row, row + w, T(0));
        continue;
      }
      const T m_new = std::max(m[ri], mx);
      const T alpha = m[ri] == neg_inf ? T(0) : vexp(m[ri] - m_new);
      // e^(s − m) stored and summed in one pass (a second pass that loaded what this one had
      // just stored, in halves, waited for the stores: a fifth of this kernel's time)
      const vec<T> base = splat<vec<T>>(m_new);
      vec<T> sum{};
      for (std::int64_t j = 0; j < ws; j += lanes) {
        const vec<T> e = vexp_lanes<T>(load(row + j) - base);
        store(row + j, e);
        sum += e;
      }
      l[ri] = l[ri] * alpha + lane_total<T>(sum);
      if (alpha != T(1))
        for (std::int64_t c = 0; c < dv; ++c) acc[ri * dv + c] *= alpha;
      m[ri] = m_new;
      if (pr.drop) pr.apply_dropout(n, r0 + ri, j0, w, row);  // the normaliser l keeps every key
    }
    gemm<T>(false, false, rows, dv, w, T(1), s, ws, pr.v.at(n, j0), pr.v.ld, T(1), acc, dv, pr.bf16);
  }
  for (std::int64_t ri = 0; ri < rows; ++ri) {
    T* o = out + (pr.o.at(n, r0 + ri) - pr.o.base);
    const T inv = l[ri] > T(0) ? T(1) / l[ri] : T(0);
    for (std::int64_t c = 0; c < dv; ++c) o[c] = acc[ri * dv + c] * inv;
    if (lse) lse[n * pr.rows + r0 + ri] = l[ri] > T(0) ? m[ri] + static_cast<T>(std::log(l[ri])) : neg_inf;
  }
}

// Entry n's gradients: dq, dk, dv (each may be null) added to; blocks recomputed from lse.
template <class T>
LOOM_VECTOR_CLONES void backward_entry(const problem<T>& pr, const operand<const T>& dout, const operand<T>& dq, const operand<T>& dk,
                    const operand<T>& dvv, const std::vector<T*>& dmask, const T* lse, std::int64_t n) {
  bool any_dmask = false;
  for (T* g : dmask) any_dmask = any_dmask || g;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T c = static_cast<T>(pr.p->scale);
  for (std::int64_t r0 = 0; r0 < pr.rows; r0 += query_block) {
    const std::int64_t r1 = std::min(pr.rows, r0 + query_block), rows = r1 - r0;
    T* p = scratch<T>(static_cast<std::size_t>(rows * (3 * key_block + 1)));
    T* dp = p + rows * key_block;
    T* dsum = dp + rows * key_block;  // D = rowsum(do ⊙ o)
    T* pd = dsum + rows;              // with dropout: p ⊙ m / (1 − P)
    for (std::int64_t ri = 0; ri < rows; ++ri) dsum[ri] = lane_dot(dout.at(n, r0 + ri), pr.o.at(n, r0 + ri), pr.dv);
    const auto [klo, khi] = pr.key_span(n, r0, r1);
    for (std::int64_t j0 = klo; j0 < khi; j0 += key_block) {
      const std::int64_t j1 = std::min(khi, j0 + key_block), w = j1 - j0;
      gemm<T>(false, true, rows, w, pr.d, c, pr.q.at(n, r0), pr.q.ld, pr.k.at(n, j0), pr.k.ld, T(0), p, w, pr.bf16);
      for (std::int64_t ri = 0; ri < rows; ++ri) {
        T* row = p + ri * w;
        pr.masks.apply(n, r0 + ri, j0, j1, row);
        const T l = lse[n * pr.rows + r0 + ri];
        if (l == neg_inf) std::fill(row, row + w, T(0));
        else
          for (std::int64_t j = 0; j < w; ++j) row[j] = vexp(row[j] - l);
      }
      const T* used = p;  // the weights o was made with
      if (pr.drop) {
        std::copy(p, p + rows * w, pd);
        for (std::int64_t ri = 0; ri < rows; ++ri) pr.apply_dropout(n, r0 + ri, j0, w, pd + ri * w);
        used = pd;
      }
      if (dvv.base)  // dv += (weights used)ᵀ do
        gemm<T>(true, false, w, pr.dv, rows, T(1), used, w, dout.at(n, r0), dout.ld, T(1), dvv.at(n, j0), dvv.ld, pr.bf16);
      if (!dq.base && !dk.base && !any_dmask) continue;
      gemm<T>(false, true, rows, w, pr.dv, T(1), dout.at(n, r0), dout.ld, pr.v.at(n, j0), pr.v.ld, T(0), dp, w, pr.bf16);
      if (pr.drop)  // the gradient of the weights before dropout
        for (std::int64_t ri = 0; ri < rows; ++ri) pr.apply_dropout(n, r0 + ri, j0, w, dp + ri * w);
      for (std::int64_t ri = 0; ri < rows; ++ri)  // ds = p ⊙ (dp − D)
        for (std::int64_t j = 0; j < w; ++j) dp[ri * w + j] = p[ri * w + j] * (dp[ri * w + j] - dsum[ri]);
      for (std::size_t m = 0; m < dmask.size(); ++m) {  // an added mask's gradient: ds where it lies
        T* g = dmask[m];
        if (!g) continue;
        const auto& am = pr.masks.added[m];
        for (std::int64_t ri = 0; ri < rows; ++ri) {
          T* gr = g + am.off[static_cast<std::size_t>(n)] + (r0 + ri) * am.row + j0 * am.col;
          for (std::int64_t j = 0; j < w; ++j) gr[j * am.col] += dp[ri * w + j];
        }
      }
      if (dq.base) gemm<T>(false, false, rows, pr.d, w, c, dp, w, pr.k.at(n, j0), pr.k.ld, T(1), dq.at(n, r0), dq.ld, pr.bf16);
      if (dk.base) gemm<T>(true, false, w, pr.d, rows, c, dp, w, pr.q.at(n, r0), pr.q.ld, T(1), dk.at(n, j0), dk.ld, pr.bf16);
    }
  }
}

}  // namespace fused_attention
}  // namespace loom::ops
