// Broadcasting in the kernels: two operands laid over an output (NumPy's rule, aligned at the
// last axis, size 1 repeated), their loops, and the deterministic sums over broadcast axes
// that their gradients need. Private to the kernels.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "loom/core/tensor.hpp"
#include "parallel.hpp"

namespace loom::ops {

/// An output of dims `dims` with two operands over it: element (i_0, ..) of the output is
/// element Σ i_k · stride[o][k] of operand o (stride 0 where the operand broadcasts). Axes of
/// size 1 are dropped and neighbouring axes merged where both operands allow, so the common
/// cases are short: [n] (same shapes), [rows, cols] (a bias), [rows, 1]-like patterns.
struct broadcast_layout {
  int rank = 0;
  std::array<std::int64_t, max_rank> dims{};
  std::array<std::array<std::int64_t, max_rank>, 2> stride{};
  std::int64_t size = 1;  // output elements

  /// The layout of `out` with operands of dims `a` and `b` (each broadcast onto it).
  broadcast_layout(const dims_t& out, const dims_t& a, const dims_t& b) {
    const int r = out.rank;
    std::array<std::array<bool, max_rank>, 2> bc{};  // operand o broadcasts along axis k
    std::array<std::int64_t, max_rank> od{};
    int n = 0;
    for (int k = 0; k < r; ++k) {
      const std::int64_t d = out.d[k];
      size *= d;
      if (d == 1) continue;
      const int ka = k - (r - a.rank), kb = k - (r - b.rank);
      const bool ba = ka < 0 || a.d[ka] == 1, bb = kb < 0 || b.d[kb] == 1;
      if (n > 0 && bc[0][n - 1] == ba && bc[1][n - 1] == bb) {  // merge with the axis before
        od[n - 1] *= d;
        continue;
      }
      od[n] = d;
      bc[0][n] = ba;
      bc[1][n] = bb;
      ++n;
    }
    rank = n;
    for (int k = 0; k < n; ++k) dims[k] = od[k];
    for (int o = 0; o < 2; ++o) {
      std::int64_t st = 1;
      for (int k = n - 1; k >= 0; --k) {
        stride[o][k] = bc[o][k] ? 0 : st;
        if (!bc[o][k]) st *= od[k];
      }
    }
  }

  /// Calls fn(out_offset, off_a, off_b, length, step_a, step_b) for runs of the output along
  /// its last (merged) axis, in parallel chunks; step_x is 0 or 1.
  template <class Fn>
  void for_runs(Fn&& fn) const {
    if (size == 0) return;
    if (rank == 0) {  // one element
      fn(std::int64_t{0}, std::int64_t{0}, std::int64_t{0}, std::int64_t{1}, std::int64_t{0}, std::int64_t{0});
      return;
    }
    const std::int64_t len = dims[rank - 1], sa = stride[0][rank - 1], sb = stride[1][rank - 1];
    if (rank == 1) {  // one run: split it into chunks
      for_chunks(len, 1 << 15, [&](std::int64_t b, std::int64_t e) { fn(b, b * sa, b * sb, e - b, sa, sb); });
      return;
    }
    const std::int64_t runs = size / len;
    for_chunks(runs, grain_for(len), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        std::int64_t oa = 0, ob = 0, rest = r;
        for (int k = rank - 2; k >= 0; --k) {
          const std::int64_t i = rest % dims[k];
          rest /= dims[k];
          oa += i * stride[0][k];
          ob += i * stride[1][k];
        }
        fn(r * len, oa, ob, len, sa, sb);
      }
    });
  }

  /// The gradient of operand `o`: dst[e] (= when fresh, += otherwise) Σ term(out_offset,
  /// other_offset) over the output elements that read element e of operand o. Parallel over
  /// chunks of o's elements; each sum runs over the broadcast axes in row-major order, so the
  /// result depends on the shapes only (not on the threads).
  template <class T, class Term>
  void reduce_into(int o, T* dst, bool fresh, Term term) const {
    const int other = 1 - o;
    std::array<int, max_rank> kept{}, summed{};
    int nk = 0, ns = 0;
    std::int64_t kept_size = 1, summed_size = 1;
    for (int k = 0; k < rank; ++k) {
      if (stride[o][k] != 0) {
        kept[nk++] = k;
        kept_size *= dims[k];
      } else {
        summed[ns++] = k;
        summed_size *= dims[k];
      }
    }
    if (size == 0) {
      if (fresh) std::fill(dst, dst + kept_size, T(0));
      return;
    }
    std::array<std::int64_t, max_rank> out_stride{};
    for (std::int64_t k = rank - 1, st = 1; k >= 0; --k) {
      out_stride[k] = st;
      st *= dims[k];
    }
    // the output and other-operand offsets of kept element e (row-major over the kept axes,
    // which is dst's order)
    auto kept_offsets = [&](std::int64_t e, std::int64_t& out_off, std::int64_t& other_off) {
      out_off = other_off = 0;
      for (int j = nk - 1; j >= 0; --j) {
        const int k = kept[j];
        const std::int64_t i = e % dims[k];
        e /= dims[k];
        out_off += i * out_stride[k];
        other_off += i * stride[other][k];
      }
    };
    const std::int64_t grain = std::max<std::int64_t>(grain_for(2 * summed_size), 16);
    for_chunks(kept_size, grain, [&](std::int64_t e0, std::int64_t e1) {
      const std::int64_t n = e1 - e0;
      std::vector<std::int64_t> ko(static_cast<std::size_t>(n)), kb(static_cast<std::size_t>(n));
      for (std::int64_t e = 0; e < n; ++e) kept_offsets(e0 + e, ko[static_cast<std::size_t>(e)], kb[static_cast<std::size_t>(e)]);
      // the common case (a bias, a mask over rows): the chunk's elements lie in one run of the
      // output and of the other operand (step 1 or 0): plain loops the compiler vectorises
      const std::int64_t o0 = ko[0], b0 = kb[0], step = n > 1 ? kb[1] - kb[0] : 0;
      bool run = step == 0 || step == 1;
      for (std::int64_t e = 0; e < n && run; ++e)
        run = ko[static_cast<std::size_t>(e)] == o0 + e && kb[static_cast<std::size_t>(e)] == b0 + e * step;
      std::array<std::int64_t, max_rank> idx{};
      std::int64_t so = 0, sb = 0;  // offsets of the current summed index
      for (std::int64_t s = 0; s < summed_size; ++s) {
        if (run && step == 1) {
          if (s == 0 && fresh)
            for (std::int64_t e = 0; e < n; ++e) dst[e0 + e] = term(so + o0 + e, sb + b0 + e);
          else
            for (std::int64_t e = 0; e < n; ++e) dst[e0 + e] += term(so + o0 + e, sb + b0 + e);
        } else if (run) {
          if (s == 0 && fresh)
            for (std::int64_t e = 0; e < n; ++e) dst[e0 + e] = term(so + o0 + e, sb + b0);
          else
            for (std::int64_t e = 0; e < n; ++e) dst[e0 + e] += term(so + o0 + e, sb + b0);
        } else if (s == 0 && fresh) {
          for (std::int64_t e = 0; e < n; ++e)
            dst[e0 + e] = term(so + ko[static_cast<std::size_t>(e)], sb + kb[static_cast<std::size_t>(e)]);
        } else {
          for (std::int64_t e = 0; e < n; ++e)
            dst[e0 + e] += term(so + ko[static_cast<std::size_t>(e)], sb + kb[static_cast<std::size_t>(e)]);
        }
        for (int j = ns - 1; j >= 0; --j) {  // next summed index, row-major
          const int k = summed[j];
          so += out_stride[k];
          sb += stride[other][k];
          if (++idx[j] < dims[k]) break;
          so -= dims[k] * out_stride[k];
          sb -= dims[k] * stride[other][k];
          idx[j] = 0;
        }
      }
    });
  }
};

}  // namespace loom::ops
