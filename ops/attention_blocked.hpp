// Fused attention: the blocked kernels — online softmax over blocks of keys, products by GEMM.
// Private to ops/attention.cpp, which alone includes it (one translation unit: the kernels
// stay out of every other file).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "attention_lanes.hpp"
#include "blas.hpp"
#include "loom/core/parallel.hpp"
#include "packing_pool.hpp"
#include "sgemm_avx512.hpp"

namespace loom::ops {
namespace fused_attention {  // named, not anonymous: the kernels' lambdas capture these types

// ---- keys and values packed once per entry ----
//
// The blocked kernels multiply by Kᵀ (the scores), by V (the forward's weights · V) and, in the
// backward, by Vᵀ (dp) one key block at a time, for every query block: each call copied that
// block of K or V into the GEMM's panels again, 8 times per entry at 1024 rows. In float (loom's
// GEMM), an entry's Kᵀ, V and Vᵀ are copied into panels once, and each key block reads its slice
// (a key block starting at a multiple of 32 for Kᵀ and Vᵀ, a whole key block for V; others, and
// bf16 products, take the per-call path). Same bits: the GEMM computes each element from its row
// and column alone (sgemm_avx512.hpp).

/// c = alpha · x · op(B)[:, j0, j0 + w) from op(B) packed by pack_rows_t (n columns in all): true;
/// false (the caller calls gemm) when not float, not packed, or the GEMM does not take the slice.
template <class T>
bool from_panels(const T* panels, std::int64_t n, std::int64_t rows, std::int64_t w, std::int64_t k, T alpha,
                 const T* x, std::int64_t ldx, std::int64_t j0, T* c, std::int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    return panels && sgemm_avx512_panels(rows, w, k, alpha, x, ldx, panels, n, j0, 0.f, c, ldc);
  else
    return false;
}

/// Entry n's xᵀ (x: [keys, cols], keys the columns of op(B)) into panels at `out` (the caller's
/// buffer of sgemm_panels_size(x.rows, x.cols) floats): true; false when not float or the GEMM
/// does not take it.
template <class T>
bool pack_rows_t(const operand<const T>& x, std::int64_t n, T* out) {
  if constexpr (std::is_same_v<T, float>) return sgemm_pack_panels(true, x.rows, x.cols, x.at(n, 0), x.ld, out);
  else return false;
}

/// Kᵀ and V of every entry in panels, made once for all the query blocks of a forward (float
/// only; empty otherwise, and when an entry has one query block: nothing would be copied twice),
/// one copy for the entries that read the same keys or values (grouped-query heads).
/// V is packed per key block (rows [b · key_block, (b + 1) · key_block) as an op(B) of its own),
/// since weights · V sums over a block's keys: the forward had copied each block of V into the
/// GEMM's panels again for every query block (2.5% of MHA forward B1 T1024's samples, AMD EPYC
/// Zen 3). The same bits (sgemm_avx512_panels).
template <class T>
class packed_kv {
 public:
  packed_kv(const problem<T>& pr, bool worth) {
    if constexpr (std::is_same_v<T, float>) {
      if (!worth || pr.bf16 || !sgemm_avx512_takes(false, true, 2, pr.keys, pr.d)) return;
      // entries that read the same keys (values) share one copy: grouped heads, broadcast K or V
      const std::vector<std::int64_t> k_offs = slots(pr.k.off, key_slot_), v_offs = slots(pr.v.off, value_slot_);
      const auto nk = static_cast<std::int64_t>(k_offs.size()), nv = static_cast<std::int64_t>(v_offs.size());
      stride_ = sgemm_panels_size(pr.keys, pr.d);
      const bool values = sgemm_avx512_takes(false, false, 2, pr.dv, 1);
      key_blocks_ = (pr.keys + key_block - 1) / key_block;
      keys_ = pr.keys;
      block_ = values ? sgemm_panels_size(pr.dv, key_block) : 0;  // a multiple of 32 floats
      buf_ = take_packing_buffer<float>();
      panels_ = line_aligned(buf_, nk * stride_ + nv * key_blocks_ * block_);
      values_ = panels_ + nk * stride_;
      for_chunks(std::max(nk, nv), 1, [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) {
          const auto at = static_cast<std::size_t>(i);
          if (i < nk) sgemm_pack_panels(true, pr.keys, pr.d, pr.k.base + k_offs[at], pr.k.ld, panels_ + i * stride_);
          for (std::int64_t b = 0; i < nv && block_ && b < key_blocks_; ++b) {
            const std::int64_t j0 = b * key_block;
            sgemm_pack_panels(false, pr.dv, std::min(key_block, pr.keys - j0), pr.v.base + v_offs[at] + j0 * pr.v.ld,
                              pr.v.ld, values_ + (i * key_blocks_ + b) * block_);
          }
        }
      });
    }
  }
  ~packed_kv() {
    if constexpr (std::is_same_v<T, float>) give_packing_buffer(std::move(buf_));
  }
  packed_kv(const packed_kv&) = delete;
  packed_kv& operator=(const packed_kv&) = delete;
  /// Entry n's Kᵀ in panels, or null.
  const T* keys_of(std::int64_t n) const {
    if constexpr (std::is_same_v<T, float>)
      return stride_ ? panels_ + key_slot_[static_cast<std::size_t>(n)] * stride_ : nullptr;
    else return nullptr;
  }
  /// acc[rows, dv] += s · V[j0, j0 + w) (s: rows × w, row stride lds) from entry n's packed block
  /// that starts at j0 (a multiple of key_block; w at most its length: a causal span ends inside
  /// it): true; false (the caller calls gemm, which gives the same bits) when V is not packed, j0
  /// starts no block, or rows < 2 (gemm takes one row as a GEMV). A shorter span reads the first w
  /// rows of each 32-column panel, one product per panel.
  bool values_product(std::int64_t n, std::int64_t j0, std::int64_t w, std::int64_t rows, const T* s, std::int64_t lds,
                      T* acc, std::int64_t dv) const {
    if constexpr (std::is_same_v<T, float>) {
      if (!block_ || rows < 2 || w < 1 || j0 < 0 || j0 % key_block != 0 || j0 >= keys_) return false;
      const std::int64_t k = std::min(key_block, keys_ - j0);  // the block's rows
      if (w > k) return false;
      const float* block = values_ + (value_slot_[static_cast<std::size_t>(n)] * key_blocks_ + j0 / key_block) * block_;
      if (w == k) return sgemm_avx512_panels(rows, dv, w, 1.f, s, lds, block, dv, 0, 1.f, acc, dv);
      // each panel on its own: the first w rows of the panel's [k, width] (a last panel of fewer
      // than 16 columns is not taken, and the whole product then takes gemm's path)
      // (asked before the first product: no panel may be added to acc unless every one is)
      for (std::int64_t j = 0; j < dv; j += 32)
        if (!sgemm_avx512_takes(false, false, rows, std::min<std::int64_t>(32, dv - j), w)) return false;
      bool all = true;
      for (std::int64_t j = 0; j < dv; j += 32) {
        const std::int64_t cols = std::min<std::int64_t>(32, dv - j);
        all = sgemm_avx512_panels(rows, cols, w, 1.f, s, lds, block + j * k, cols, 0, 1.f, acc + j, dv) && all;
      }
      return all;
    } else {
      return false;
    }
  }

 private:
  // The distinct offsets in off, in order; slot[n] = the index of off[n] among them.
  static std::vector<std::int64_t> slots(const std::vector<std::int64_t>& off, std::vector<std::int64_t>& slot) {
    std::vector<std::int64_t> distinct(off);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    slot.resize(off.size());
    for (std::size_t n = 0; n < off.size(); ++n)
      slot[n] = std::lower_bound(distinct.begin(), distinct.end(), off[n]) - distinct.begin();
    return distinct;
  }

  packing_buffer<float> buf_;
  float* panels_ = nullptr;  // in buf_, on a cache line: each key slot's Kᵀ, then each value slot's blocks
  float* values_ = nullptr;
  std::vector<std::int64_t> key_slot_, value_slot_;
  std::int64_t stride_ = 0, block_ = 0, key_blocks_ = 0, keys_ = 0;
};

// Rows [r0, r1) of entry n: the online softmax over key blocks, then o and the row lse. kv: the
// entries' Kᵀ and V in panels (packed_kv), or null.
template <class T>
LOOM_VECTOR_CLONES void forward_rows(const problem<T>& pr, T* out, T* lse, std::int64_t n, std::int64_t r0, std::int64_t r1,
                                     const packed_kv<T>* kv = nullptr) {
  const T* kt = kv ? kv->keys_of(n) : nullptr;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const std::int64_t rows = r1 - r0, dv = pr.dv;
  if (pr.one_block() && n + 1 < pr.N) {  // the next entry's operands, into the second level
    for (const auto* x : {&pr.q, &pr.o}) prefetch_entry<2>(*x, n + 1, pr.rows);
    for (const auto* x : {&pr.k, &pr.v}) prefetch_entry<2>(*x, n + 1, pr.keys);
  }
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
    if (!from_panels(kt, pr.keys, rows, w, pr.d, static_cast<T>(pr.p->scale), pr.q.at(n, r0), pr.q.ld, j0, s, ws))
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
      l[ri] = l[ri] * alpha + exp_row_sum(row, ws, m_new);
      if (alpha != T(1))
        for (std::int64_t c = 0; c < dv; ++c) acc[ri * dv + c] *= alpha;
      m[ri] = m_new;
      if (pr.drop) pr.apply_dropout(n, r0 + ri, j0, w, row);  // the normaliser l keeps every key
    }
    if (!kv || !kv->values_product(n, j0, w, rows, s, ws, acc, dv))
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
  // float, more than one query block: Kᵀ and Vᵀ in panels once for all of them (see above)
  thread_local std::vector<T> kv_panels;
  const T* kt = nullptr;
  const T* vt = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    if (!pr.bf16 && pr.rows > query_block) {
      const std::int64_t nk = sgemm_panels_size(pr.keys, pr.d), nv = sgemm_panels_size(pr.keys, pr.dv);
      if (kv_panels.size() < static_cast<std::size_t>(nk + nv)) kv_panels.resize(static_cast<std::size_t>(nk + nv));
      if (pack_rows_t(pr.k, n, kv_panels.data())) kt = kv_panels.data();
      if ((dq.base || dk.base || any_dmask) && pack_rows_t(pr.v, n, kv_panels.data() + nk)) vt = kv_panels.data() + nk;
    }
  }
  for (std::int64_t r0 = 0; r0 < pr.rows; r0 += query_block) {
    const std::int64_t r1 = std::min(pr.rows, r0 + query_block), rows = r1 - r0;
    T* p = scratch<T>(static_cast<std::size_t>(rows * (3 * key_block + 1)));
    T* dp = p + rows * key_block;
    T* dsum = dp + rows * key_block;  // D = rowsum(do ⊙ o)
    T* pd = dsum + rows;              // with dropout: p ⊙ m / (1 − P)
    const auto [klo, khi] = pr.key_span(n, r0, r1);
    // D_i = do_i · o_i. With every key in one block and no dropout, o_i = Σ_j p_ij v_j, so D_i =
    // Σ_j p_ij (do_i · v_j) = Σ_j p_ij dp_ij: taken below from the block's own p and dp, in the
    // first level, instead of reading o, long evicted
    const bool d_from_p = !pr.drop && khi - klo <= key_block;
    if (!d_from_p)
      for (std::int64_t ri = 0; ri < rows; ++ri) dsum[ri] = lane_dot(dout.at(n, r0 + ri), pr.o.at(n, r0 + ri), pr.dv);
    for (std::int64_t j0 = klo; j0 < khi; j0 += key_block) {
      const std::int64_t j1 = std::min(khi, j0 + key_block), w = j1 - j0;
      if (!from_panels(kt, pr.keys, rows, w, pr.d, c, pr.q.at(n, r0), pr.q.ld, j0, p, w))
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
      if (!from_panels(vt, pr.keys, rows, w, pr.dv, T(1), dout.at(n, r0), dout.ld, j0, dp, w))
        gemm<T>(false, true, rows, w, pr.dv, T(1), dout.at(n, r0), dout.ld, pr.v.at(n, j0), pr.v.ld, T(0), dp, w, pr.bf16);
      if (pr.drop)  // the gradient of the weights before dropout
        for (std::int64_t ri = 0; ri < rows; ++ri) pr.apply_dropout(n, r0 + ri, j0, w, dp + ri * w);
      for (std::int64_t ri = 0; ri < rows; ++ri) {  // ds = p ⊙ (dp − D)
        if (d_from_p) dsum[ri] = lane_dot(p + ri * w, dp + ri * w, w);
        for (std::int64_t j = 0; j < w; ++j) dp[ri * w + j] = p[ri * w + j] * (dp[ri * w + j] - dsum[ri]);
      }
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
