// Broadcasting in the kernels: two operands laid over an output (NumPy's rule, aligned at the
// last axis, size 1 repeated), their loops, and the deterministic sums over broadcast axes
// that their gradients need. Private to the kernels.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "loom/core/tensor.hpp"
#include "loom/core/parallel.hpp"

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
      // the first run's index over the outer axes, then counters (no division per run)
      std::array<std::int64_t, max_rank> idx{};
      std::int64_t oa = 0, ob = 0, rest = r0;
      for (int k = rank - 2; k >= 0; --k) {
        idx[k] = rest % dims[k];
        rest /= dims[k];
        oa += idx[k] * stride[0][k];
        ob += idx[k] * stride[1][k];
      }
      for (std::int64_t r = r0; r < r1; ++r) {
        fn(r * len, oa, ob, len, sa, sb);
        for (int k = rank - 2; k >= 0; --k) {
          oa += stride[0][k];
          ob += stride[1][k];
          if (++idx[k] < dims[k]) break;
          oa -= dims[k] * stride[0][k];
          ob -= dims[k] * stride[1][k];
          idx[k] = 0;
        }
      }
    });
  }

  /// y = op(a, b) over the output, the operands broadcast: the loop for the runs' stride
  /// pattern is chosen once (not per run), so each is a plain loop the compiler vectorises.
  template <class T, class Op>
  void elementwise(const T* a, const T* b, T* y, Op op) const {
    const std::int64_t sa = rank ? stride[0][rank - 1] : 0, sb = rank ? stride[1][rank - 1] : 0;
    auto runs = [&](auto step_a, auto step_b) {
      if (rank == 2 && stride[0][0] == dims[1] && stride[1][0] == 0 && step_a == 1 && step_b == 1) {
        // a bias: b [len] over the rows of a [rows, len]
        const std::int64_t len = dims[1];
        for_chunks(dims[0], grain_for(len), [&](std::int64_t r0, std::int64_t r1) {
          for (std::int64_t r = r0; r < r1; ++r)
            for (std::int64_t j = 0; j < len; ++j) y[r * len + j] = op(a[r * len + j], b[j]);
        });
        return;
      }
      for_runs([&](std::int64_t o, std::int64_t ia, std::int64_t ib, std::int64_t n, std::int64_t, std::int64_t) {
        T* yo = y + o;
        const T* xa = a + ia;
        const T* xb = b + ib;
        for (std::int64_t j = 0; j < n; ++j) yo[j] = op(xa[j * step_a], xb[j * step_b]);
      });
    };
    using one = std::integral_constant<std::int64_t, 1>;
    using zero = std::integral_constant<std::int64_t, 0>;
    if (sa == 1 && sb == 1) runs(one{}, one{});
    else if (sa == 1) runs(one{}, zero{});
    else if (sb == 1) runs(zero{}, one{});
    else runs(zero{}, zero{});
  }

  /// The gradient of operand `o`: dst[e] (= when fresh, += otherwise) Σ term(out_offset,
  /// other_offset) over the output elements that read element e of operand o. Parallel over
  /// chunks of o's elements; each sum runs over the broadcast axes in row-major order, so the
  /// result depends on the shapes only (not on the threads). A term that takes a third
  /// argument also gets e, the offset of operand o's own element (div's and maximum's
  /// gradients read both operands).
  template <class T, class Term>
  void reduce_into(int o, T* dst, bool fresh, Term user_term) const {
    auto term = [&](std::int64_t out, std::int64_t other_at, std::int64_t own) {
      if constexpr (std::is_invocable_v<Term&, std::int64_t, std::int64_t, std::int64_t>)
        return user_term(out, other_at, own);
      else
        return user_term(out, other_at);
    };
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
    if (ns == 0) {  // the operand has the output's shape: one term per element, along the runs
      for_runs([&](std::int64_t out, std::int64_t ia, std::int64_t ib, std::int64_t n, std::int64_t sa, std::int64_t sb) {
        const std::int64_t own = o == 0 ? ia : ib;  // = out: the operand is laid out as the output
        T* d = dst + own;
        const std::int64_t other_at = o == 0 ? ib : ia, step = o == 0 ? sb : sa;
        if (fresh)
          for (std::int64_t j = 0; j < n; ++j) d[j] = term(out + j, other_at + j * step, own + j);
        else
          for (std::int64_t j = 0; j < n; ++j) d[j] += term(out + j, other_at + j * step, own + j);
      });
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
      // calls row(so, sb, first) for every summed index in row-major order, with the output's
      // and the other operand's offsets of that index
      auto sweep = [&](auto row) {
        if (ns == 1) {  // one summed axis: plain strides
          const std::int64_t k = summed[0], os = out_stride[k], bs = stride[other][k];
          for (std::int64_t s = 0; s < summed_size; ++s) row(s * os, s * bs, s == 0);
          return;
        }
        std::array<std::int64_t, max_rank> idx{};
        std::int64_t so = 0, sb = 0;
        for (std::int64_t s = 0; s < summed_size; ++s) {
          row(so, sb, s == 0);
          for (int j = ns - 1; j >= 0; --j) {  // next summed index
            const int k = summed[j];
            so += out_stride[k];
            sb += stride[other][k];
            if (++idx[j] < dims[k]) break;
            so -= dims[k] * out_stride[k];
            sb -= dims[k] * stride[other][k];
            idx[j] = 0;
          }
        }
      };
      T* d = dst + e0;
      if (run && step == 1)
        sweep([&](std::int64_t so, std::int64_t sb, bool first) {
          const std::int64_t oo = so + o0, bb = sb + b0;
          if (first && fresh)
            for (std::int64_t e = 0; e < n; ++e) d[e] = term(oo + e, bb + e, e0 + e);
          else
            for (std::int64_t e = 0; e < n; ++e) d[e] += term(oo + e, bb + e, e0 + e);
        });
      else if (run)
        sweep([&](std::int64_t so, std::int64_t sb, bool first) {
          const std::int64_t oo = so + o0, bb = sb + b0;
          if (first && fresh)
            for (std::int64_t e = 0; e < n; ++e) d[e] = term(oo + e, bb, e0 + e);
          else
            for (std::int64_t e = 0; e < n; ++e) d[e] += term(oo + e, bb, e0 + e);
        });
      else
        sweep([&](std::int64_t so, std::int64_t sb, bool first) {
          for (std::int64_t e = 0; e < n; ++e) {
            const T v = term(so + ko[static_cast<std::size_t>(e)], sb + kb[static_cast<std::size_t>(e)], e0 + e);
            d[e] = first && fresh ? v : d[e] + v;
          }
        });
    });
  }
};

}  // namespace loom::ops
