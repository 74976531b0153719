// Fused attention kernels. See ops/fused_attention.hpp for the math.
//
// The problem at run time: q, k, v and the output as [N batch entries][rows][cols] views of
// their nodes' buffers (N = the product of the scores' batch dims, e.g. B·H), masks as a key
// range per row plus optional boolean masks. Forward splits over (entry, block of query rows);
// backward over the entries that own one block of keys and values (with grouped heads, the
// query entries sharing it run in order inside one task): no two tasks write the same bytes,
// and every sum runs in an order fixed by the sizes — results do not depend on the threads.

// The small-block kernels' helpers (and vmath's exp_clamped) pass GCC vectors by value only to
// each other, always inlined: no call's ABI is involved.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "blas.hpp"
#include "dropout_mask.hpp"
#include "fused_attention.hpp"
#include "loom/core/errors.hpp"
#include "mask_strides.hpp"
#include "loom/core/parallel.hpp"
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

// ---------------------------------------------------------------- vectors
//
// GCC's generic vectors of `lanes` elements, which each version of a kernel (LOOM_VECTOR_CLONES)
// compiles to its own registers — one zmm for 16 floats on AVX-512, two ymm on AVX2 (a·b + c
// contracted to an FMA in both); the helpers are always inlined so that each version gets its
// own copy.

constexpr int lanes = 16;  // elements per vector (the small kernels: query rows per block)
template <class T>
struct lane_vector;
template <>
struct lane_vector<float> {
  typedef float type __attribute__((vector_size(lanes * sizeof(float))));
};
template <>
struct lane_vector<double> {
  typedef double type __attribute__((vector_size(lanes * sizeof(double))));
};
template <class T>
using vec = typename lane_vector<T>::type;

/// x in every lane (x − 0 is x exactly, −0 included; GCC broadcasts the scalar operand).
template <class V, class S>
[[gnu::always_inline]] inline V splat(S x) {
  return x - V{};
}
template <class T>
[[gnu::always_inline]] inline vec<T> load(const T* p) {
  vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
[[gnu::always_inline]] inline void store(T* p, const vec<T>& v) {
  std::memcpy(p, &v, sizeof v);
}

/// f of every lane (the double versions of the lane functions: libm, every digit).
template <class T, class F>
[[gnu::always_inline]] inline vec<T> per_lane(const vec<T>& x, F f) {
  vec<T> y;
  for (int i = 0; i < lanes; ++i) y[i] = f(x[i]);
  return y;
}

/// e^x in every lane: vmath's exp_clamped with the clamp at −88 instead of vexp's −87.3 and its
/// final select (x < −87.3 ? 0) left out — at −88 the result is exactly +0 already (also for
/// −∞). Same bits as vexp except for x in (−87.7, −87.3), where vexp gives 0 and this e^x
/// (below 1.2e−38). In double: std::exp per lane. (A select of GCC's generic vectors of this
/// width after a compare came out as scalar code per lane; the clamps' selects did not.)
template <class T>
[[gnu::always_inline]] inline vec<T> vexp_lanes(const vec<T>& x) {
  if constexpr (std::is_same_v<T, double>) {
    return per_lane<T>(x, [](double v) { return std::exp(v); });
  } else {
    using V = vec<float>;
    const V lo = splat<V>(-88.0f), hi = splat<V>(88.3f);
    V xc = x < lo ? lo : x;
    xc = hi < xc ? hi : xc;
    return exp_clamped(xc);
  }
}

/// The index vectors of __builtin_shuffle for vec<T>: integers of T's size.
template <class T>
struct lane_index;
template <>
struct lane_index<float> {
  using elem = std::int32_t;
  typedef elem type __attribute__((vector_size(lanes * sizeof(elem))));
};
template <>
struct lane_index<double> {
  using elem = std::int64_t;
  typedef elem type __attribute__((vector_size(lanes * sizeof(elem))));
};

/// ln x in every lane for x normal and positive (vmath's log_normal; the small forward's row sums
/// l ≥ 1, lanes with l = 0 give a finite value the caller discards): one vector instead of a libm
/// call per row (0.4% of the tiny training step [AMD EPYC]). In double: std::log per lane
/// (gradient checks want every digit).
template <class T>
[[gnu::always_inline]] inline vec<T> vlog_lanes(const vec<T>& x) {
  if constexpr (std::is_same_v<T, double>) {
    return per_lane<T>(x, [](double v) { return std::log(v); });
  } else {
    return log_normal(x);
  }
}

/// The sum of v's lanes, in a fixed order: the upper half added to the lower, four times (lane
/// 0 ends with ((v0 + v8) + (v4 + v12)) + …). Shuffles in registers: the same sums through an
/// array were a store and reloads of its halves that waited for the store.
template <class T>
[[gnu::always_inline]] inline T lane_total(vec<T> v) {
  static_assert(lanes == 16, "the shuffles below are written for 16 lanes");
  using I = typename lane_index<T>::type;
  v += __builtin_shuffle(v, I{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
  v += __builtin_shuffle(v, I{4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3});
  v += __builtin_shuffle(v, I{2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1});
  v += __builtin_shuffle(v, I{1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0});
  return v[0];
}

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
    // s's rows are padded to whole vectors (−∞ past w, which e^ turns into +0) so that the max,
    // the exponentials and their sum run without a scalar tail
    const std::int64_t ws = (w + lanes - 1) / lanes * lanes;
    gemm<T>(false, true, rows, w, pr.d, static_cast<T>(pr.p->scale), pr.q.at(n, r0), pr.q.ld, pr.k.at(n, j0), pr.k.ld,
            T(0), s, ws);
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
    gemm<T>(false, false, rows, dv, w, T(1), s, ws, pr.v.at(n, j0), pr.v.ld, T(1), acc, dv);
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


// ---------------------------------------------------------------- small blocks
//
// When every key fits in one block (keys ≤ small_keys), the path above spends most of its time
// outside its products: per query row it masks, takes a max, exponentiates and sums rows as
// short as 16 keys, and every product of a few thousand multiply-adds is a GEMM call of its own
// (the tiny model: heads of 16, sequences of 16 — 20% of its training step went there). Here
// `lanes` query rows are one vector: the scores and weights are kept transposed, st[j · lanes
// + i] for key j and row i, so the masks, the max, the exponentials and the sums run down the
// keys with the whole block of rows in each vector operation; the products keep their sums in
// vectors of `lanes` columns (the vectors section above). All keys are one block, so no online
// rescaling is needed: p = e^(s − max) / l directly. Same math and saved lse as above.

// At most this many keys. Measured [AMD EPYC Zen 4]: faster than the blocked kernels with 16
// and 32 keys (heads of 16); with 64 keys and heads of 32 (the small model) the training step
// was 1–2% slower at 1 thread, so those stay with the blocked kernels and their GEMMs.
constexpr std::int64_t small_keys = 32;

/// Whether the small-block kernels take this problem: every key in one block, more than one
/// query row (decoding's one row keeps the path above), no dropout.
template <class T>
bool small_path(const problem<T>& pr) {
  return pr.keys <= small_keys && pr.rows >= 2 && !pr.drop;
}

/// Asks for rows [0, rows) of x's entry n to be brought into the cache: the next entry's
/// operands, fetched while this one computes. Each entry of a small problem reads a few dozen
/// rows that were written long before (in the forward, for the backward) and sit in the last
/// level of cache: without this the kernels waited for them more than they computed.
template <class P>
[[gnu::always_inline]] inline void prefetch_entry(const operand<P>& x, std::int64_t n, std::int64_t rows) {
  if (!x.base) return;
  constexpr std::int64_t line = 64 / sizeof(P);
  for (std::int64_t r = 0; r < rows; ++r) {
    const P* row = x.at(n, r);
    for (std::int64_t c = 0; c < x.cols; c += line) __builtin_prefetch(row + c);
  }
}

/// One stage of a 16 × 16 transpose in registers: rows i and i + B (bit B of i clear) swap the
/// elements whose column has bit B set in one and clear in the other — (i, e) ↔ (i ^ B, e ^ B)
/// when bit B of i and of e differ. The four stages B = 8, 4, 2, 1 swap every bit of the row
/// with the same bit of the column: the transpose. Each pair is two two-source shuffles (one
/// vpermt2ps each with AVX-512).
template <class T, int B>
[[gnu::always_inline]] inline void transpose_stage(vec<T>* r) {
  using I = typename lane_index<T>::type;
  using E_t = typename lane_index<T>::elem;
  constexpr auto masks = []<std::size_t... E>(std::index_sequence<E...>) {
    // row i takes its own element e, or row i + B's e − B; row i + B: its own e, or row i's e + B
    return std::pair{I{static_cast<E_t>((E & B) ? lanes + E - B : E)...}, I{static_cast<E_t>((E & B) ? lanes + E : E + B)...}};
  }(std::make_index_sequence<lanes>{});
#pragma GCC unroll 16
  for (int i = 0; i < lanes; ++i)
    if (!(i & B)) {
      const vec<T> a = r[i], b = r[i + B];
      r[i] = __builtin_shuffle(a, b, masks.first);
      r[i + B] = __builtin_shuffle(a, b, masks.second);
    }
}

/// xt[c · lanes + i] = column c of row r0 + i of x's entry n, for i < nr; zero in the lanes past nr.
/// Blocks of 16 columns are transposed in registers and stored as whole vectors, so that the
/// products' vector loads of xt can take them from the stores (the element-wise stores of a
/// plain transposing loop cannot be forwarded to a vector load, which then waits for all 16 to
/// reach the cache: that wait was a fifth of the small backward's time); columns past the last
/// whole block, element by element.
template <class T>
[[gnu::always_inline]] inline void load_transposed(const operand<const T>& x, std::int64_t n, std::int64_t r0, int nr,
                                                   T* xt) {
  const T* x0 = x.at(n, r0);
  const std::int64_t ld = x.ld;
  std::int64_t c0 = 0;
  for (; c0 + lanes <= x.cols; c0 += lanes) {
    vec<T> r[lanes];
#pragma GCC unroll 16
    for (int i = 0; i < lanes; ++i) r[i] = i < nr ? load(x0 + i * ld + c0) : vec<T>{};
    transpose_stage<T, 8>(r);
    transpose_stage<T, 4>(r);
    transpose_stage<T, 2>(r);
    transpose_stage<T, 1>(r);
#pragma GCC unroll 16
    for (int e = 0; e < lanes; ++e) store(xt + (c0 + e) * lanes, r[e]);
  }
  if (c0 == x.cols) return;
  for (std::int64_t c = c0; c < x.cols; ++c) store(xt + c * lanes, vec<T>{});
  for (int i = 0; i < nr; ++i)
    for (std::int64_t c = c0; c < x.cols; ++c) xt[c * lanes + i] = x0[i * ld + c];
}

/// out[j · lanes + (0, lanes)] = scale · Σ_c a[j · lda + c] · xt[c · lanes + (0, lanes)], j < w:
/// rows of a times the transposed block xt, the block's rows in one vector; four rows of a at a
/// time, so that four sums are in flight (one sum alone waits for each add).
template <class T>
[[gnu::always_inline]] inline void rows_times_block(const T* a, std::int64_t lda, std::int64_t w, std::int64_t cols,
                                                    const T* xt, T scale, T* out) {
  std::int64_t j = 0;
  for (; j + 4 <= w; j += 4) {
    vec<T> acc0{}, acc1{}, acc2{}, acc3{};
    const T* aj = a + j * lda;
    for (std::int64_t c = 0; c < cols; ++c) {
      const vec<T> x = load(xt + c * lanes);
      acc0 += aj[c] * x;
      acc1 += aj[lda + c] * x;
      acc2 += aj[2 * lda + c] * x;
      acc3 += aj[3 * lda + c] * x;
    }
    store(out + j * lanes, acc0 * scale);
    store(out + (j + 1) * lanes, acc1 * scale);
    store(out + (j + 2) * lanes, acc2 * scale);
    store(out + (j + 3) * lanes, acc3 * scale);
  }
  for (; j < w; ++j) {
    vec<T> acc{};
    const T* aj = a + j * lda;
    for (std::int64_t c = 0; c < cols; ++c) acc += aj[c] * load(xt + c * lanes);
    store(out + j * lanes, acc * scale);
  }
}

/// R outputs y_r = y + r · ldy (r < R), each y_r[0, n) = (add ? y_r : 0) + scale[r · ss] · Σ_{t < m}
/// a[r · ar + t · as] · x[t · ldx + (0, n)]: combinations of the same m rows of x, `lanes` columns
/// at a time, the R sums in flight together (ss = 0: one scale for all).
template <int R, class T>
[[gnu::always_inline]] inline void combine_rows(T* y, std::int64_t ldy, bool add, const T* scale, std::int64_t ss,
                                                const T* a, std::int64_t ar, std::int64_t as, std::int64_t m,
                                                const T* x, std::int64_t ldx, std::int64_t n) {
  std::int64_t c0 = 0;
  for (; c0 + lanes <= n; c0 += lanes) {
    vec<T> acc[R] = {};
    for (std::int64_t t = 0; t < m; ++t) {
      const vec<T> xr = load(x + t * ldx + c0);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] += a[r * ar + t * as] * xr;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      T* yr = y + r * ldy + c0;
      store(yr, add ? load(yr) + acc[r] * scale[r * ss] : acc[r] * scale[r * ss]);
    }
  }
  for (; c0 < n; ++c0)
    for (int r = 0; r < R; ++r) {
      T acc = 0;
      for (std::int64_t t = 0; t < m; ++t) acc += a[r * ar + t * as] * x[t * ldx + c0];
      T& yr = y[r * ldy + c0];
      yr = add ? yr + scale[r * ss] * acc : scale[r * ss] * acc;
    }
}

/// combine_rows for `count` outputs, four at a time.
template <class T>
[[gnu::always_inline]] inline void combine_all(std::int64_t count, T* y, std::int64_t ldy, bool add, const T* scale,
                                               std::int64_t ss, const T* a, std::int64_t ar, std::int64_t as,
                                               std::int64_t m, const T* x, std::int64_t ldx, std::int64_t n) {
  std::int64_t r = 0;
  for (; r + 4 <= count; r += 4)
    combine_rows<4>(y + r * ldy, ldy, add, scale + r * ss, ss, a + r * ar, ar, as, m, x, ldx, n);
  for (; r < count; ++r)
    combine_rows<1>(y + r * ldy, ldy, add, scale + r * ss, ss, a + r * ar, ar, as, m, x, ldx, n);
}

/// The keys a block of query rows sees: [klo, klo + w), the union of its rows' key ranges (as
/// problem::key_span; w = 0 when no row sees any key).
struct key_window {
  std::int64_t klo = 0, w = 0;
};

/// The masked scores of rows [r0, r0 + nr) of entry n against the keys the block sees (returned),
/// transposed into st ([w][lanes]; −∞ where a row may not look and in the lanes past nr); qt
/// receives the rows of q transposed.
template <class T>
[[gnu::always_inline]] inline key_window small_scores(const problem<T>& pr, std::int64_t n, std::int64_t r0, int nr,
                                                      T* qt, T* st) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  std::int64_t first[lanes], last[lanes];  // each row's keys [first, last), one masks.range call per row
  std::int64_t klo = pr.keys, khi = 0;
  for (int i = 0; i < nr; ++i) {
    std::tie(first[i], last[i]) = pr.masks.range(n, r0 + i);
    if (first[i] < last[i]) {
      klo = std::min(klo, first[i]);
      khi = std::max(khi, last[i]);
    }
  }
  const std::int64_t w = std::max<std::int64_t>(0, khi - klo);
  load_transposed(pr.q, n, r0, nr, qt);
  rows_times_block(pr.k.at(n, klo), pr.k.ld, w, pr.d, qt, static_cast<T>(pr.p->scale), st);
  // the keys each row may see, relative to klo (none in the lanes past nr); a plain loop over
  // the lanes, which GCC vectorises well (its lowering of a generic-vector select on two integer
  // compares was scalar code, 10× slower)
  std::int32_t lo[lanes] = {}, hi[lanes] = {};
  for (int i = 0; i < nr; ++i) {
    lo[i] = static_cast<std::int32_t>(std::clamp<std::int64_t>(first[i] - klo, 0, w));
    hi[i] = static_cast<std::int32_t>(std::clamp<std::int64_t>(last[i] - klo, lo[i], w));
  }
  for (std::int32_t j = 0; j < static_cast<std::int32_t>(w); ++j) {
    T* sj = st + j * lanes;
    for (int i = 0; i < lanes; ++i) sj[i] = (j >= lo[i]) & (j < hi[i]) ? sj[i] : neg_inf;
  }
  if (!pr.masks.allowed.empty() || !pr.masks.added.empty()) {
    T row[small_keys];  // boolean and float masks, one row at a time
    for (int i = 0; i < nr; ++i) {
      for (std::int64_t j = 0; j < w; ++j) row[j] = st[j * lanes + i];
      pr.masks.apply(n, r0 + i, klo, klo + w, row);
      for (std::int64_t j = 0; j < w; ++j) st[j * lanes + i] = row[j];
    }
  }
  return {klo, w};
}

// Rows [r0, r0 + nr) of entry n (nr ≤ lanes): o and the row lse.
template <class T>
LOOM_VECTOR_CLONES void forward_small(const problem<T>& pr, T* out, T* lse, std::int64_t n, std::int64_t r0, int nr) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  if (r0 + nr >= pr.rows && n + 1 < pr.N) {  // the next entry's operands (usually this thread's next item)
    prefetch_entry(pr.q, n + 1, std::min<std::int64_t>(pr.rows, lanes));
    prefetch_entry(pr.k, n + 1, pr.keys);
    prefetch_entry(pr.v, n + 1, pr.keys);
  }
  T* qt = scratch<T>(static_cast<std::size_t>((pr.d + small_keys) * lanes));
  T* st = qt + pr.d * lanes;
  const auto [klo, w] = small_scores(pr, n, r0, nr, qt, st);
  // the row maxima (plain loops over the lanes: GCC vectorises these)
  T mx[lanes], base[lanes];
  std::fill(mx, mx + lanes, neg_inf);
  for (std::int64_t j = 0; j < w; ++j) {
    const T* sj = st + j * lanes;
    for (int i = 0; i < lanes; ++i) mx[i] = sj[i] > mx[i] ? sj[i] : mx[i];
  }
  for (int i = 0; i < lanes; ++i) base[i] = mx[i] == neg_inf ? T(0) : mx[i];  // no key to see: e^(−∞) = 0
  const vec<T> b = load(base);
  vec<T> l{};
  for (std::int64_t j = 0; j < w; ++j) {
    const vec<T> e = vexp_lanes<T>(load(st + j * lanes) - b);
    store(st + j * lanes, e);
    l += e;
  }
  T inv[lanes];
  for (int i = 0; i < nr; ++i) inv[i] = l[i] > T(0) ? T(1) / l[i] : T(0);
  if (lse) {
    const vec<T> log_l = vlog_lanes<T>(l);
    for (int i = 0; i < nr; ++i) lse[n * pr.rows + r0 + i] = l[i] > T(0) ? mx[i] + log_l[i] : neg_inf;
  }
  // o[i] = Σ_j p[i, j] v[j] / l[i]
  combine_all(nr, out + (pr.o.at(n, r0) - pr.o.base), pr.o.ld, false, inv, 1, st, 1, lanes, w, pr.v.at(n, klo),
              pr.v.ld, pr.dv);
}

// Entry n's gradients (dq, dk, dv may each be null), added to; the weights recomputed from lse.
template <class T>
LOOM_VECTOR_CLONES void backward_small(const problem<T>& pr, const operand<const T>& dout, const operand<T>& dq,
                                       const operand<T>& dk, const operand<T>& dvv, const T* lse, std::int64_t n) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T one = 1, c = static_cast<T>(pr.p->scale);  // the products' scales
  const std::int64_t d = pr.d, dv = pr.dv;
  if (n + 1 < pr.N) {  // the next entry (usually the next this thread runs)
    for (const auto* x : {&pr.q, &pr.k, &pr.v, &pr.o, &dout}) prefetch_entry(*x, n + 1, x == &pr.k || x == &pr.v ? pr.keys : pr.rows);
    prefetch_entry(dq, n + 1, pr.rows);
    prefetch_entry(dk, n + 1, pr.keys);
    prefetch_entry(dvv, n + 1, pr.keys);
  }
  T* qt = scratch<T>(static_cast<std::size_t>((std::max(d, dv) + 2 * small_keys) * lanes));
  T* pt = qt + std::max(d, dv) * lanes;  // the weights, transposed (qt later holds do transposed)
  T* ds = pt + small_keys * lanes;       // dp, then ds, transposed
  for (std::int64_t r0 = 0; r0 < pr.rows; r0 += lanes) {
    const int nr = static_cast<int>(std::min<std::int64_t>(lanes, pr.rows - r0));
    const auto [klo, w] = small_scores(pr, n, r0, nr, qt, pt);
    // p = e^(s − lse); a row with no key to see (lse = −∞) and the lanes past nr subtract +∞
    // instead, so that every weight is e^(−∞) = 0
    T base[lanes];
    for (int i = 0; i < lanes; ++i) {
      const T l = i < nr ? lse[n * pr.rows + r0 + i] : neg_inf;
      base[i] = l == neg_inf ? -neg_inf : l;
    }
    const vec<T> b = load(base);
    for (std::int64_t j = 0; j < w; ++j) store(pt + j * lanes, vexp_lanes<T>(load(pt + j * lanes) - b));
    if (dvv.base)  // dv[j] += Σ_i p[i, j] do[i]
      combine_all(w, dvv.at(n, klo), dvv.ld, true, &one, 0, pt, lanes, 1, nr, dout.at(n, r0), dout.ld, dv);
    if (!dq.base && !dk.base) continue;
    T dsum_rows[lanes] = {};  // D = rowsum(do ⊙ o)
    for (int i = 0; i < nr; ++i) dsum_rows[i] = lane_dot(dout.at(n, r0 + i), pr.o.at(n, r0 + i), dv);
    const vec<T> dsum = load(dsum_rows);
    load_transposed(dout, n, r0, nr, qt);
    rows_times_block(pr.v.at(n, klo), pr.v.ld, w, dv, qt, T(1), ds);  // dp = do vᵀ
    for (std::int64_t j = 0; j < w; ++j)                                  // ds = p ⊙ (dp − D)
      store(ds + j * lanes, load(pt + j * lanes) * (load(ds + j * lanes) - dsum));
    if (dq.base)  // dq[i] += c · Σ_j ds[i, j] k[j]
      combine_all(nr, dq.at(n, r0), dq.ld, true, &c, 0, ds, 1, lanes, w, pr.k.at(n, klo), pr.k.ld, d);
    if (dk.base)  // dk[j] += c · Σ_i ds[i, j] q[i]
      combine_all(w, dk.at(n, klo), dk.ld, true, &c, 0, ds, lanes, 1, nr, pr.q.at(n, r0), pr.q.ld, d);
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
void attention_op::forward(const op_args<T>& a) {
  const problem<T> pr(a);
  if (small_path(pr)) {  // blocks of `lanes` rows, chunks of about 2^16 multiply-adds
    const std::int64_t blocks = (pr.rows + lanes - 1) / lanes;
    const std::int64_t grain = grain_for(lanes * pr.keys * (pr.d + pr.dv), std::int64_t{1} << 16);
    for_chunks(pr.N * blocks, grain, [&](std::int64_t b0, std::int64_t b1) {
      for (std::int64_t item = b0; item < b1; ++item) {
        const std::int64_t n = item / blocks, r0 = (item % blocks) * lanes;
        forward_small(pr, a.out, a.saved, n, r0, static_cast<int>(std::min<std::int64_t>(lanes, pr.rows - r0)));
      }
    });
    return;
  }
  const std::int64_t blocks = (pr.rows + query_block - 1) / query_block;
  for_chunks(pr.N * blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t item = b0; item < b1; ++item) {
      const std::int64_t n = item / blocks, r0 = (item % blocks) * query_block;
      forward_rows(pr, a.out, a.saved, n, r0, std::min(pr.rows, r0 + query_block));
    }
  });
}

template <class T>
void attention_op::backward(const op_args<T>& a) {
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
  // entries that share their keys and values (grouped heads) run in one task, in order: each
  // entry's group is named by its leader, the group's first entry; entries sorted by (leader,
  // entry) are then the groups one after the other, in order of their first entries (sorted
  // vectors, not maps: this runs at every call, for every entry)
  const auto N = static_cast<std::size_t>(pr.N);
  auto kv = [&](std::int64_t n) {
    return std::pair{pr.k.off[static_cast<std::size_t>(n)], pr.v.off[static_cast<std::size_t>(n)]};
  };
  std::vector<std::int64_t> entries(N), leader(N);
  for (std::size_t n = 0; n < N; ++n) entries[n] = static_cast<std::int64_t>(n);
  std::stable_sort(entries.begin(), entries.end(), [&](std::int64_t x, std::int64_t y) { return kv(x) < kv(y); });
  for (std::size_t i = 0; i < N; ++i)
    leader[static_cast<std::size_t>(entries[i])] =
        i > 0 && kv(entries[i]) == kv(entries[i - 1]) ? leader[static_cast<std::size_t>(entries[i - 1])] : entries[i];
  auto by_leader = [&](std::int64_t n) { return std::pair{leader[static_cast<std::size_t>(n)], n}; };
  std::sort(entries.begin(), entries.end(), [&](std::int64_t x, std::int64_t y) { return by_leader(x) < by_leader(y); });
  std::vector<std::size_t> start;  // group g = entries[start[g], start[g + 1])
  for (std::size_t i = 0; i < N; ++i)
    if (i == 0 || leader[static_cast<std::size_t>(entries[i])] != leader[static_cast<std::size_t>(entries[i - 1])])
      start.push_back(i);
  start.push_back(N);
  // a query shared across groups, or an added mask's gradient: entries share what they write,
  // so everything runs in one task, in order
  std::vector<std::pair<std::int64_t, std::int64_t>> q_leader(N);  // (query offset, group leader)
  for (std::size_t n = 0; n < N; ++n) q_leader[n] = {pr.q.off[n], leader[n]};
  std::sort(q_leader.begin(), q_leader.end());
  bool shared_query = false;
  for (std::size_t i = 1; i < N; ++i)
    shared_query = shared_query || (q_leader[i].first == q_leader[i - 1].first && q_leader[i].second != q_leader[i - 1].second);
  if ((shared_query || serial) && N > 0) {
    for (std::size_t n = 0; n < N; ++n) entries[n] = static_cast<std::int64_t>(n);
    start = {0, N};
  }
  const std::size_t n_groups = start.size() - 1;
  // small problems (no float mask's gradient): groups in chunks of about 2^16 multiply-adds
  const bool small = small_path(pr) && !serial;
  const std::int64_t per_entry = pr.rows * pr.keys * (2 * pr.d + 3 * pr.dv);
  const std::int64_t per_group = n_groups == 0 ? 0 : pr.N / static_cast<std::int64_t>(n_groups) * per_entry;
  const std::int64_t grain = small ? grain_for(per_group, std::int64_t{1} << 16) : 1;
  for_chunks(static_cast<std::int64_t>(n_groups), grain, [&](std::int64_t g0, std::int64_t g1) {
    for (auto g = static_cast<std::size_t>(g0); g < static_cast<std::size_t>(g1); ++g)
      for (std::size_t i = start[g]; i < start[g + 1]; ++i)
        if (const std::int64_t n = entries[i]; small) backward_small(pr, dout, dq, dk, dv, a.saved, n);
        else backward_entry(pr, dout, dq, dk, dv, dmask, a.saved, n);
  });
}

template void attention_op::forward(const op_args<float>&);
template void attention_op::forward(const op_args<double>&);
template void attention_op::backward(const op_args<float>&);
template void attention_op::backward(const op_args<double>&);

}  // namespace loom::ops
