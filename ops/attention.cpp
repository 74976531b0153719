// Fused attention kernels. See ops/fused_attention.hpp for the math.
//
// The problem at run time: q, k, v and the output as [N batch entries][rows][cols] views of
// their nodes' buffers (N = the product of the scores' batch dims, e.g. B·H), masks as a key
// range per row plus optional boolean masks. Forward splits over (entry, block of query rows);
// backward over the entries that own one block of keys and values (with grouped heads, the
// query entries sharing it run in order inside one task): no two tasks write the same bytes,
// and every sum runs in an order fixed by the sizes — results do not depend on the threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "blas.hpp"
#include "dropout_mask.hpp"
#include "fused_attention.hpp"
#include "loom/core/errors.hpp"
#include "mask_strides.hpp"
#include "parallel.hpp"
#include "vector_isa.hpp"
#include "vmath.hpp"

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
  const int vb = v.rank - 2;
  for (std::int64_t n = 0; n < n_entries; ++n) {
    std::int64_t off = v.offset, rest = n;
    for (int ax = nb - 1; ax >= 0; --ax) {
      const std::int64_t i = batch[ax] ? rest % batch[ax] : 0;
      rest = batch[ax] ? rest / batch[ax] : 0;
      const int va = ax - (nb - vb);
      if (va >= 0 && v.dims[va] != 1) off += i * v.stride[va];
    }
    o.off[static_cast<std::size_t>(n)] = off;
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

  /// Scales row i of entry n's weights over keys [j0, j0 + w) by dropout's m / (1 − P).
  void apply_dropout(std::int64_t n, std::int64_t i, std::int64_t j0, std::int64_t w, T* row) const {
    const std::int64_t first = (n * rows + i) * keys + j0;  // the element's index in the weights [.., T, S]
    for (std::int64_t j = 0; j < w; ++j) row[j] = drop->keep(first + j) ? row[j] * keep_scale : T(0);
  }

  explicit problem(const op_args<T>& a) : p(static_cast<const attention_params*>(a.fused)) {
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

template <class T>
T* scratch(std::size_t elements) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < elements) buffer.resize(elements);
  return buffer.data();
}

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
    gemm<T>(false, true, rows, w, pr.d, static_cast<T>(pr.p->scale), pr.q.at(n, r0), pr.q.ld, pr.k.at(n, j0), pr.k.ld,
            T(0), s, w);
    for (std::int64_t ri = 0; ri < rows; ++ri) {
      T* row = s + ri * w;
      pr.masks.apply(n, r0 + ri, j0, j1, row);
      const T mx = lane_max(row, w);
      if (mx == neg_inf) {  // nothing to see in this block
        std::fill(row, row + w, T(0));
        continue;
      }
      const T m_new = std::max(m[ri], mx);
      const T alpha = m[ri] == neg_inf ? T(0) : vexp(m[ri] - m_new);
      for (std::int64_t j = 0; j < w; ++j) row[j] = vexp(row[j] - m_new);
      l[ri] = l[ri] * alpha + lane_sum(row, w);
      if (alpha != T(1))
        for (std::int64_t c = 0; c < dv; ++c) acc[ri * dv + c] *= alpha;
      m[ri] = m_new;
      if (pr.drop) pr.apply_dropout(n, r0 + ri, j0, w, row);  // the normaliser l keeps every key
    }
    gemm<T>(false, false, rows, dv, w, T(1), s, w, pr.v.at(n, j0), pr.v.ld, T(1), acc, dv);
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
      gemm<T>(false, true, rows, w, pr.d, c, pr.q.at(n, r0), pr.q.ld, pr.k.at(n, j0), pr.k.ld, T(0), p, w);
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
        gemm<T>(true, false, w, pr.dv, rows, T(1), used, w, dout.at(n, r0), dout.ld, T(1), dvv.at(n, j0), dvv.ld);
      if (!dq.base && !dk.base && !any_dmask) continue;
      gemm<T>(false, true, rows, w, pr.dv, T(1), dout.at(n, r0), dout.ld, pr.v.at(n, j0), pr.v.ld, T(0), dp, w);
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
      if (dq.base) gemm<T>(false, false, rows, pr.d, w, c, dp, w, pr.k.at(n, j0), pr.k.ld, T(1), dq.at(n, r0), dq.ld);
      if (dk.base) gemm<T>(true, false, w, pr.d, rows, c, dp, w, pr.q.at(n, r0), pr.q.ld, T(1), dk.at(n, j0), dk.ld);
    }
  }
}

}  // namespace fused_attention

using namespace fused_attention;

std::int64_t attention_saved(const void* params, const dims_t&, std::span<const dims_t> in) {
  const strided_dims q = apply_view(static_cast<const attention_params*>(params)->q, in[0]);
  std::int64_t n = 1;
  for (int ax = 0; ax < q.rank - 1; ++ax) n *= q.dims[ax];  // entries × query rows
  return n;
}

template <class T>
void attention_kernel<T>::forward(const op_args<T>& a) {
  const problem<T> pr(a);
  const std::int64_t blocks = (pr.rows + query_block - 1) / query_block;
  for_chunks(pr.N * blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t item = b0; item < b1; ++item) {
      const std::int64_t n = item / blocks, r0 = (item % blocks) * query_block;
      forward_rows(pr, a.out, a.saved, n, r0, std::min(pr.rows, r0 + query_block));
    }
  });
}

template <class T>
void attention_kernel<T>::backward(const op_args<T>& a) {
  const problem<T> pr(a);
  const auto& p = *pr.p;
  const operand<const T> dout = pr.entries(a.dout, apply_view(p.out, a.out_dims));
  auto grad = [&](int i, const view_chain& chain) {
    T* g = a.grad(i);
    return g ? pr.entries(g, apply_view(chain, a.in_dims[static_cast<std::size_t>(i)])) : operand<T>{};
  };
  const operand<T> dq = grad(0, p.q), dk = grad(1, p.k), dv = grad(2, p.v);
  std::vector<T*> dmask;  // the added masks' gradients (null: none needed)
  bool serial = false;
  for (const auto& m : pr.masks.added) {
    dmask.push_back(a.grad(m.input));
    serial = serial || dmask.back();
  }
  // entries that share their keys and values (grouped heads) run in one task, in order
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::int64_t>> by_kv;
  for (std::int64_t n = 0; n < pr.N; ++n)
    by_kv[{pr.k.off[static_cast<std::size_t>(n)], pr.v.off[static_cast<std::size_t>(n)]}].push_back(n);
  std::vector<std::vector<std::int64_t>> groups;
  for (auto& [key, entries] : by_kv) groups.push_back(std::move(entries));
  std::sort(groups.begin(), groups.end());
  std::map<std::int64_t, std::size_t> q_group;  // a query shared across groups: everything in one task
  bool shared_query = false;
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (std::int64_t n : groups[g]) {
      const auto [at, fresh] = q_group.emplace(pr.q.off[static_cast<std::size_t>(n)], g);
      shared_query = shared_query || (!fresh && at->second != g);
    }
  if (shared_query || serial) {  // entries share what they write: one task, in order
    groups.assign(1, {});
    for (std::int64_t n = 0; n < pr.N; ++n) groups[0].push_back(n);
  }
  for_chunks(static_cast<std::int64_t>(groups.size()), 1, [&](std::int64_t g0, std::int64_t g1) {
    for (std::int64_t g = g0; g < g1; ++g)
      for (std::int64_t n : groups[static_cast<std::size_t>(g)]) backward_entry(pr, dout, dq, dk, dv, dmask, a.saved, n);
  });
}

template struct attention_kernel<float>;
template struct attention_kernel<double>;

}  // namespace loom::ops
