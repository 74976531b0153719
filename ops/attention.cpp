// Fused attention: the op's entry points (saved elements, forward, backward). The math is in
// ops/fused_attention.hpp; the kernels, in the order each builds on the last, are in
// attention_problem.hpp (the problem at run time), attention_lanes.hpp (vector helpers),
// attention_blocked.hpp (online softmax over key blocks) and attention_small.hpp (every key in
// one block), each included by this file only.
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
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_small.hpp"  // and through it attention_blocked, _lanes, _problem
#include "blas.hpp"
#include "dropout_mask.hpp"
#include "fused_attention.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/errors.hpp"
#include "loom/core/parallel.hpp"
#include "mask_strides.hpp"
#include "vector_isa.hpp"
#include "vmath.hpp"

namespace loom::ops {

namespace {
std::atomic<int> forced_small_lanes{0};  // 0: the CPU's choice (attention_force_small_lanes)
std::atomic<bool> forced_blocked{false};  // attention_force_blocked
// kernel calls by path (attention_paths): one relaxed increment per node run, not per entry
std::atomic<std::int64_t> runs_small_forward{0}, runs_blocked_forward{0}, runs_small_backward{0},
    runs_blocked_backward{0};
}  // namespace

attention_path_counts attention_paths() {
  return {runs_small_forward.load(std::memory_order_relaxed), runs_blocked_forward.load(std::memory_order_relaxed),
          runs_small_backward.load(std::memory_order_relaxed), runs_blocked_backward.load(std::memory_order_relaxed)};
}

void attention_force_blocked(bool blocked) { forced_blocked.store(blocked, std::memory_order_relaxed); }

bool fused_attention::blocked_forced() { return forced_blocked.load(std::memory_order_relaxed); }

void attention_force_small_lanes(int lanes) {
  if (lanes != 0 && lanes != 8 && lanes != 16)
    throw std::invalid_argument("attention_force_small_lanes: lanes must be 0 (the CPU's choice), 8 or 16, not " +
                                std::to_string(lanes));
  forced_small_lanes.store(lanes, std::memory_order_relaxed);
}

int fused_attention::small_lanes() {
  const int forced = forced_small_lanes.load(std::memory_order_relaxed);
  return forced ? forced : wide_vectors ? 16 : 8;
}

using namespace fused_attention;

std::int64_t attention_saved(const void* params, const dims_t&, std::span<const dims_t> in) {
  const strided_dims q = apply_view(static_cast<const attention_params*>(params)->q, in[0]);
  std::int64_t n = 1;
  for (int ax = 0; ax < q.rank - 1; ++ax) n *= q.dims[ax];  // entries × query rows
  return n;
}

template <class T>
void forward_kernel(attention_op, const op_args<T>& a) {
  const problem<T> pr(a);
  if (small_path(pr)) {  // blocks of B · L rows, chunks of about 2^16 multiply-adds
    runs_small_forward.fetch_add(1, std::memory_order_relaxed);
    auto run = [&]<int L, int B>() {
      constexpr int S = B * L;
      const std::int64_t blocks = (pr.rows + S - 1) / S;
      const std::int64_t grain = grain_for(S * pr.keys * (pr.d + pr.dv), std::int64_t{1} << 16);
      for_chunks(pr.N * blocks, grain, [&](std::int64_t b0, std::int64_t b1) {
        for (std::int64_t item = b0; item < b1; ++item) {
          const std::int64_t n = item / blocks, r0 = (item % blocks) * S;
          forward_small<T, L, B>(pr, a.out, a.saved, n, r0, static_cast<int>(std::min<std::int64_t>(S, pr.rows - r0)));
        }
      });
    };
    if (small_lanes() == 16 && pr.rows >= 32) run.template operator()<16, 2>();  // two vectors of rows
    else if (small_lanes() == 16) run.template operator()<16, 1>();
    else run.template operator()<8, 1>();
    return;
  }
  runs_blocked_forward.fetch_add(1, std::memory_order_relaxed);
  const std::int64_t blocks = (pr.rows + query_block - 1) / query_block;
  const packed_kv<T> kv(pr, blocks > 1);
  for_chunks(pr.N * blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t item = b0; item < b1; ++item) {
      const std::int64_t n = item / blocks, r0 = (item % blocks) * query_block;
      forward_rows(pr, a.out, a.saved, n, r0, std::min(pr.rows, r0 + query_block), &kv);
    }
  });
}

template <class T>
void backward_kernel(attention_op, const op_args<T>& a) {
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
  const bool small = small_backward_path(pr) && !serial, wide = small_lanes() == 16;
  (small ? runs_small_backward : runs_blocked_backward).fetch_add(1, std::memory_order_relaxed);
  const std::int64_t per_entry = pr.rows * pr.keys * (2 * pr.d + 3 * pr.dv);
  const std::int64_t per_group = n_groups == 0 ? 0 : pr.N / static_cast<std::int64_t>(n_groups) * per_entry;
  const std::int64_t grain = small ? grain_for(per_group, std::int64_t{1} << 16) : 1;
  for_chunks(static_cast<std::int64_t>(n_groups), grain, [&](std::int64_t g0, std::int64_t g1) {
    for (auto g = static_cast<std::size_t>(g0); g < static_cast<std::size_t>(g1); ++g)
      for (std::size_t i = start[g]; i < start[g + 1]; ++i)
        if (const std::int64_t n = entries[i]; small && wide)
          backward_small<T, 16>(pr, dout, dq, dk, dv, a.saved, n);
        else if (small)
          backward_small<T, 8>(pr, dout, dq, dk, dv, a.saved, n);
        else backward_entry(pr, dout, dq, dk, dv, dmask, a.saved, n);
  });
}

}  // namespace loom::ops

template struct loom::compiled_kernels<loom::ops::attention_op>;
