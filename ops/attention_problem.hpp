// Fused attention: the problem at run time — operands as [N][rows][cols] views, masks as key
// ranges per row, and the options of one call.
// Private to ops/attention.cpp, which alone includes it (one translation unit: the kernels
// stay out of every other file).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "dropout_mask.hpp"
#include "fused_attention.hpp"
#include "loom/core/errors.hpp"
#include "mask_strides.hpp"

namespace loom::ops {
namespace fused_attention {  // named, not anonymous: the kernels' lambdas capture these types


constexpr std::int64_t query_block = 128, key_block = 256;

/// An operand as [N][rows][cols]: entry n's row r starts at base + off[n] + r · ld.
template <class P>
struct operand {
  P* base = nullptr;
  std::vector<std::int64_t> off;
  std::int64_t rows = 0, cols = 0, ld = 0;
  P* at(std::int64_t n, std::int64_t r) const { return base + off[static_cast<std::size_t>(n)] + r * ld; }
};

/// Asks for rows [0, rows) of x's entry n to be brought into the cache (`Locality` as
/// __builtin_prefetch's: 3 the first level, 2 the second): the next entry's operands, fetched
/// while this one computes. Each entry of a small problem reads a few dozen rows that were
/// written long before (in the forward, for the backward) and sit in the last level of cache:
/// without this the kernels waited for them more than they computed.
template <int Locality = 3, class P>
[[gnu::always_inline]] inline void prefetch_entry(const operand<P>& x, std::int64_t n, std::int64_t rows) {
  if (!x.base) return;
  constexpr std::int64_t line = 64 / sizeof(P);
  for (std::int64_t r = 0; r < rows; ++r) {
    const P* row = x.at(n, r);
    for (std::int64_t c = 0; c < x.cols; c += line) __builtin_prefetch(row + c, 0, Locality);
  }
}

/// The view v [batch.., rows, cols] over the scores' batch dims (nb axes, N entries): the
/// offset of each entry; axes the view lacks or has of size 1 broadcast.
template <class P>
operand<P> make_operand(P* base, const strided_dims& v, const std::array<std::int64_t, max_rank>& batch, int nb,
                        std::int64_t n_entries) {
  operand<P> o;
  o.base = base;
  o.rows = v.dims[v.rank - 2];
  o.cols = v.dims[v.rank - 1];
  o.ld = v.stride[v.rank - 2];
  if (v.stride[v.rank - 1] != 1 && o.cols > 1) throw error("attention: an operand's rows must be contiguous");
  o.off.resize(static_cast<std::size_t>(n_entries));
  // the stride of each batch axis in the view (0 where it lacks the axis or broadcasts it)
  std::array<std::int64_t, max_rank> step{};
  const int vb = v.rank - 2;
  for (int ax = 0; ax < nb; ++ax) {
    const int va = ax - (nb - vb);
    step[static_cast<std::size_t>(ax)] = va >= 0 && v.dims[va] != 1 ? v.stride[va] : 0;
  }
  // entries in order, their batch index counted like an odometer (no division per entry:
  // this ran for every operand of every call and was most of the node's setup time)
  std::array<std::int64_t, max_rank> idx{};
  std::int64_t off = v.offset;
  for (std::int64_t n = 0; n < n_entries; ++n) {
    o.off[static_cast<std::size_t>(n)] = off;
    for (int ax = nb - 1; ax >= 0; --ax) {
      const auto a = static_cast<std::size_t>(ax);
      off += step[a];
      if (++idx[a] < batch[a]) break;
      off -= idx[a] * step[a];
      idx[a] = 0;
    }
  }
  return o;
}

/// The masks: a range of keys [lo, hi) per row (causal, padding, left padding), boolean masks
/// and float masks added to the scores.
struct row_masks {
  std::int64_t T = 0, S = 0, rows_per_seq = 1;
  bool causal = false;
  std::vector<const std::int32_t*> len, first;
  struct allowed_mask {
    const std::uint8_t* data = nullptr;
    std::vector<std::int64_t> off;  // per entry
    std::int64_t row = 0, col = 0;  // strides along T and S (0: broadcast)
  };
  std::vector<allowed_mask> allowed;
  struct added_mask {
    const void* data = nullptr;     // T: the executor's scalar
    std::vector<std::int64_t> off;  // per entry
    std::int64_t row = 0, col = 0;  // strides along T and S (0: broadcast)
    int input = -1;                 // the node's input it is
  };
  std::vector<added_mask> added;

  std::pair<std::int64_t, std::int64_t> range(std::int64_t n, std::int64_t i) const {
    std::int64_t lo = 0, hi = S;
    if (causal) hi = std::min(hi, i + (S - T) + 1);
    const std::int64_t seq = (n * T + i) / rows_per_seq;
    for (const std::int32_t* l : len) hi = std::min<std::int64_t>(hi, l[seq]);
    for (const std::int32_t* f : first) lo = std::max<std::int64_t>(lo, f[seq]);
    return {lo, std::max(lo, hi)};
  }
  /// Sets −∞ where row i of entry n may not look, among keys [j0, j1) (row holds j1 − j0 scores).
  template <class T_>
  void apply(std::int64_t n, std::int64_t i, std::int64_t j0, std::int64_t j1, T_* row) const {
    const T_ neg_inf = -std::numeric_limits<T_>::infinity();
    auto [lo, hi] = range(n, i);
    lo = std::clamp(lo, j0, j1);
    hi = std::clamp(hi, lo, j1);
    for (std::int64_t j = j0; j < lo; ++j) row[j - j0] = neg_inf;
    for (std::int64_t j = hi; j < j1; ++j) row[j - j0] = neg_inf;
    for (const allowed_mask& m : allowed) {
      const std::uint8_t* mr = m.data + m.off[static_cast<std::size_t>(n)] + i * m.row;
      for (std::int64_t j = lo; j < hi; ++j) row[j - j0] = mr[j * m.col] ? row[j - j0] : neg_inf;
    }
    for (const added_mask& m : added) {
      const T_* mr = static_cast<const T_*>(m.data) + m.off[static_cast<std::size_t>(n)] + i * m.row;
      for (std::int64_t j = lo; j < hi; ++j) row[j - j0] += mr[j * m.col];
    }
  }
};

/// Everything a kernel call needs, from its op_args.
template <class T>
struct problem {
  const attention_params* p = nullptr;
  std::int64_t N = 1, rows = 0, keys = 0, d = 0, dv = 0;
  std::array<std::int64_t, max_rank> batch{};
  int nb = 0;
  operand<const T> q, k, v, o;
  row_masks masks;
  std::optional<dropout_mask> drop;  // dropout on the weights, when training
  T keep_scale = 1;                   // 1 / (1 − P)
  bool bf16 = false;                  // the blocked kernels' products in bf16 (op_args::bf16)

  /// Scales row i of entry n's weights over keys [j0, j0 + w) by dropout's m / (1 − P).
  void apply_dropout(std::int64_t n, std::int64_t i, std::int64_t j0, std::int64_t w, T* row) const {
    const std::int64_t first = (n * rows + i) * keys + j0;  // the element's index in the weights [.., T, S]
    for (std::int64_t j = 0; j < w; ++j) row[j] = drop->keep(first + j) ? row[j] * keep_scale : T(0);
  }

  explicit problem(const op_args<T>& a) : p(static_cast<const attention_params*>(a.fused)), bf16(a.bf16) {
    const strided_dims qv = apply_view(p->q, a.in_dims[0], a.mat_stride(0));
    nb = qv.rank - 2;
    for (int ax = 0; ax < nb; ++ax) {
      batch[ax] = qv.dims[ax];
      N *= qv.dims[ax];
    }
    q = entries(a.input(0), qv);
    k = entries(a.input(1), apply_view(p->k, a.in_dims[1], a.mat_stride(1)));
    v = entries(a.input(2), apply_view(p->v, a.in_dims[2], a.mat_stride(2)));
    o = entries(static_cast<const T*>(a.out), apply_view(p->out, a.out_dims));
    rows = q.rows;
    keys = k.rows;
    d = q.cols;
    dv = v.cols;
    mask_setup(a);
    if (p->dropout > 0 && a.training) {
      drop.emplace(a.template input<std::int32_t>(p->dropout_seed), p->dropout_hash, p->dropout);
      keep_scale = p->dropout < 1 ? static_cast<T>(1.0 / (1.0 - p->dropout)) : T(0);
    }
  }
  template <class P>
  operand<P> entries(P* base, const strided_dims& view) const {
    return make_operand(base, view, batch, nb, N);
  }

  void mask_setup(const op_args<T>& a) {
    masks.T = rows;
    masks.S = keys;
    // sequence b of padding masks: the scores' first axis (as the unfused mask kernels)
    const std::int64_t b0 = nb > 0 ? batch[0] : rows;
    masks.rows_per_seq = b0 > 0 ? std::max<std::int64_t>(1, N * rows / b0) : 1;
    // the scores' batch dims as the masks see them: with grouped queries, the groups merged
    // into heads (entry n is the same entry in both)
    std::array<std::int64_t, max_rank> frame{};
    int nf = 0;
    for (int ax = 0; ax < nb; ++ax) {
      if (p->merge_axis >= 0 && ax == p->merge_axis + 1) frame[nf - 1] *= batch[ax];
      else frame[nf++] = batch[ax];
    }
    // per entry, the offset of a mask whose strides along the scores' axes are `stride`
    auto entry_offsets = [&](const std::array<std::int64_t, max_rank>& stride) {
      std::vector<std::int64_t> off(static_cast<std::size_t>(N));
      for (std::int64_t n = 0; n < N; ++n) {
        std::int64_t at = 0, rest = n;
        for (int ax = nf - 1; ax >= 0; --ax) {
          at += (rest % frame[ax]) * stride[ax];
          rest /= frame[ax];
        }
        off[static_cast<std::size_t>(n)] = at;
      }
      return off;
    };
    for (const auto& m : p->masks) {
      if (m.kind == attention_params::mask::causal) {  // no input
        masks.causal = true;
        continue;
      }
      const void* data = a.in[static_cast<std::size_t>(m.input)];
      const dims_t& md = a.in_dims[static_cast<std::size_t>(m.input)];
      switch (m.kind) {
        case attention_params::mask::causal: break;
        case attention_params::mask::padding:
        case attention_params::mask::left_padding: {
          const auto* len = static_cast<const std::int32_t*>(data);
          const bool left = m.kind == attention_params::mask::left_padding;
          for (std::int64_t b = 0; b < md.size(); ++b)
            if (len[b] < 0 || (!left && len[b] > keys))
              throw value_error(left ? "mask_left_padding: first[" + std::to_string(b) + "] = " +
                                           std::to_string(len[b]) + " is negative"
                                     : "mask_padding: valid_len[" + std::to_string(b) + "] = " +
                                           std::to_string(len[b]) + " is outside [0, " + std::to_string(keys) +
                                           "] (the number of keys)");
          (left ? masks.first : masks.len).push_back(len);
          break;
        }
        case attention_params::mask::boolean: {  // broadcast onto [frame.., T, S]
          const auto stride = mask_strides(md, nf + 2, m.lead);
          masks.allowed.push_back({static_cast<const std::uint8_t*>(data), entry_offsets(stride), stride[nf], stride[nf + 1]});
          break;
        }
        case attention_params::mask::additive: {
          const auto stride = mask_strides(md, nf + 2, 0);
          masks.added.push_back({data, entry_offsets(stride), stride[nf], stride[nf + 1], m.input});
          break;
        }
      }
    }
  }
  /// Whether an entry is one block of queries and one of keys (the blocked forward then
  /// computes each entry in one piece, and asks for the next entry's operands ahead).
  bool one_block() const { return rows <= query_block && keys <= key_block; }
  /// The keys any of rows [r0, r1) of entry n may see: [lo, hi), empty when none.
  std::pair<std::int64_t, std::int64_t> key_span(std::int64_t n, std::int64_t r0, std::int64_t r1) const {
    std::int64_t lo = keys, hi = 0;
    for (std::int64_t i = r0; i < r1; ++i) {
      auto [a, b] = masks.range(n, i);
      if (a < b) {
        lo = std::min(lo, a);
        hi = std::max(hi, b);
      }
    }
    return {lo, std::max(lo, hi)};
  }
};

}  // namespace fused_attention
}  // namespace loom::ops
