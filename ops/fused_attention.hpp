// attention (fused): the pattern
//
//   o = matmul([dropout](softmax(mask_k(..mask_1(scale_c(matmul(q, kᵀ)))))), v)
//
// masks: causal, padding, left padding, boolean (mask_bool), additive (add of a float mask,
// broadcast); with grouped-query attention q [.., Hkv, G, T, d] meets k, v [.., Hkv, 1, S, d]
// and the masks see the scores [.., Hkv·G, T, S] (merge_axis).
//
// run as one node (a plan rewrite: ops/attention_fusion.cpp finds it; the user writes the
// primitives). q [.., T, d], k [.., S, d], v [.., S, dv] -> o [.., T, dv], read and written
// through views (views.hpp), so the heads' split and merge cost no copy.
//
//   forward: per query block, key blocks in order with an online softmax — a running max m,
//            sum l and output; the [T, S] scores never exist beyond one block:
//            s = c · q kᵀ (masked: −∞),  m' = max(m, max s),  l' = l·e^(m − m') + Σ e^(s − m'),
//            o' = o·e^(m − m') + e^(s − m') v;   o = o' / l,   saved: lse = m + log l per row
//   backward: per batch × head (each task owns its dk, dv: no atomics), blocks recomputed from
//            lse: p = e^(c · q kᵀ − lse) (masked: 0), D = rowsum(do ⊙ o),
//            dv += pᵀ do,  dp = do vᵀ,  ds = p ⊙ (dp − D),  dq += c · ds k,  dk += c · dsᵀ q
//            with dropout (training only) the weights p become p ⊙ m / (1 − P) in o and dv, and
//            dp is multiplied by the same m / (1 − P) before ds (D = rowsum(do ⊙ o) still holds);
//            m is loom::dropout's mask of the absorbed node, element (entry, row, key) of the
//            weights — the same bits as unfused;
//            an additive mask's gradient (when it has one) is ds summed over the axes it
//            broadcasts along; then every entry runs in one task, in order.
//   A row whose keys are all masked gives zeros (lse = −∞), as softmax does.
//   At most 128 keys in the forward and 32 in the backward, or 128 under a causal mask over no
//   more keys than rows (and 2+ query rows, no dropout; 32 both ways with bf16 products): the
//   same math in one key block, 16 query rows per vector, the scores transposed (small-block
//   kernels in ops/attention.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/kernel.hpp"
#include "views.hpp"

namespace loom::ops {

/// What the rewrite found: the scale, the operands' views and the masks, in order.
struct attention_params {
  double scale = 1;
  view_chain q, k, v;  // applied to the dims of the node's inputs 0, 1, 2
  view_chain out;      // applied to the node's own dims: where o [.., T, dv] sits in its value
  struct mask {
    enum kind_t : std::uint8_t { causal, padding, left_padding, boolean, additive } kind = causal;
    int input = -1;  // the node's input holding its lengths, first keys, booleans or float mask
    int lead = 0;    // boolean: the mask's first `lead` axes align with the scores' first (mask_bool<L>)
  };
  std::vector<mask> masks;
  // grouped queries: the masks see q's batch axes merge_axis and merge_axis + 1 as one (−1: none)
  int merge_axis = -1;
  // dropout on the weights (an absorbed dropout node): its probability, its structural hash
  // (which keys its mask, as the unfused kernel's) and the node's input holding the seed
  double dropout = 0;
  std::uint64_t dropout_hash = 0;
  int dropout_seed = -1;
};

/// The row log-sum-exp saved for backward: one per query row of every batch entry.
std::int64_t attention_saved(const void* params, const dims_t& out, std::span<const dims_t> in);

constexpr bool attention_reads_strided(const node_desc&, int) { return true; }

/// Makes every fused attention node run its blocked kernels, forward and backward (true), or
/// lets the problem choose again (false: the small-block kernels take forwards of at most 128
/// keys and backwards of at most 32, or 128 under a causal mask): tests reach the blocked
/// kernels with few keys this way.
/// Process-wide. Private to loom (tests).
void attention_force_blocked(bool blocked);

/// How many times the fused node's kernels ran, by path, since the process started: tests read
/// these before and after a run to see which kernels it took (attention_force_blocked).
struct attention_path_counts {
  std::int64_t small_forward = 0, blocked_forward = 0, small_backward = 0, blocked_backward = 0;
};

/// The counts so far (process-wide; one relaxed atomic increment per node run). Private to loom
/// (tests).
attention_path_counts attention_paths();

/// Query rows per block of the fused node's small-block kernels (at most 128 keys): 0, the
/// default, lets the CPU choose (16 with AVX-512, else 8); 8 or 16 force that many on any CPU
/// (tests: the output and dq are the same bits with both, dk and dv equal to rounding).
/// Process-wide; throws std::invalid_argument for any other value. Private to loom (tests).
void attention_force_small_lanes(int lanes);

/// The fused attention node (made by the attention fusion rule, ops/attention_fusion.cpp).
struct attention_op : op_def<attention_op>, compiled_kernels<attention_op> {
  static constexpr std::string_view name = "attention";
  static constexpr op_traits traits{
      .reads_strided = &attention_reads_strided,
      .backward_reads = 0xff,  // q, k, v and the masks' inputs
      .backward_reads_output = true,
      .saved_elements = &attention_saved,
      .fused = true,
  };
};

}  // namespace loom::ops

extern template struct loom::compiled_kernels<loom::ops::attention_op>;  // ops/attention.cpp
