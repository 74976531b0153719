// linear_cross_entropy (fused): a language model's head and its loss,
//   cross_entropy(add(matmul(x, wᵀ), b), target)  or  cross_entropy(matmul(x, wᵀ), target),
// run as one node (a plan rewrite: ops/cross_entropy_fusion.cpp finds it), so that training
// keeps no [N, V] logits (N rows of x, V classes) and no [N, V] gradient of them:
//
//   x [.., K], w [V, K], b [V] (optional), target [..] (int) -> loss, the scalar cross_entropy
//   gives (ignore index and label smoothing as loom/ops/cross_entropy.hpp says)
//   forward: the rows in chunks of R (chunk_rows: about 2^21 logits a chunk, at least 256 rows),
//            in order; per chunk z = x_c wᵀ + b, each row's log-sum-exp and loss, and — when
//            backward will run (op_args::will_backward) — the chunk's gradients for dloss = 1
//            while its logits are at hand: g = (softmax(z) − q) / N_counted over z in place,
//            then db (+)= Σ_rows g, dx_c = g w, dw (+)= gᵀ x_c (the chunks summed in order: no
//            dependence on the thread count)
//   backward: dx, dw, db (+)= dloss · the saved ones (no product at all)
//   Without a backward (an inference executor) the node has no saved buffer
//   (op_traits::saved_only_for_backward): forward computes the loss alone, in one chunk's logits
//   of its own.
// The products are the unfused backward's, on a chunk's rows: with every row in one chunk (the
// logits fit in 2^21 elements) and dloss = 1, the unfused bits. Forward does backward's work, so
// the step makes three products over the head, as unfused, where recomputing the logits in
// backward would make four.
// A chunk's products are gemm_chunks::batched_gemm's: a chunk of one row item over many classes
// is split there by classes so that every thread takes part.
// Memory: one saved buffer of N·K + V·K + V + R'·V elements, R' = min(N, R) (the gradients, one
// chunk's logits) instead of the unfused plan's [N, V] logits and their [N, V] gradient; dx's
// split sum takes a scratch buffer of the packing pool (at most 16 · R'·K floats).
// With int8 weights (exec_options::weights, an inference executor: forward only) the logits
// are the int8 product's, as the unfused matmul's.
#pragma once

#include <cstdint>

#include "loom/core/kernel.hpp"
#include "loom/ops/cross_entropy.hpp"

namespace loom::ops {

/// What the rewrite found: the loss's attributes, whether a bias is added (input 2; the target
/// is then input 3, else 2), and the chunk rows in force when the plan was made.
struct linear_cross_entropy_params {
  cross_entropy_attrs attrs;
  bool bias = false;
  std::int64_t forced_rows = 0;  // 0: chunk_rows' own rule
};

/// Rows per chunk for N rows of V classes: forced_rows when set, else about 2^21 logits (8 MiB
/// of float) a chunk, a multiple of 16 and at least 256 (the products stay large enough to run
/// at the kernel's speed). Depends on the shape only.
std::int64_t linear_cross_entropy_chunk_rows(const linear_cross_entropy_params& p, std::int64_t v);

/// Forces the rows per chunk of the fused nodes of plans made afterwards (0: the rule above).
/// Process-wide; throws std::invalid_argument for a negative value. Private to loom (tests:
/// several chunks on small shapes).
void linear_cross_entropy_force_rows(std::int64_t rows);
std::int64_t linear_cross_entropy_forced_rows();

/// The fused node's saved buffer, in elements: dx, dw and db for dloss = 1, then one chunk's
/// logits (forward's workspace).
std::int64_t linear_cross_entropy_saved(const void* params, const dims_t& out, std::span<const dims_t> in);

struct linear_cross_entropy_kernels {
  template <class T>
  static void forward(const op_args<T>& a);
  template <class T>
  static void backward(const op_args<T>& a);
};

/// Its weight, input 1, is read transposed (x · Wᵀ): op_traits::reads_int8_weight.
constexpr bool linear_cross_entropy_reads_int8(const node_desc&) { return true; }

struct linear_cross_entropy_op : op_def<linear_cross_entropy_op, "linear_cross_entropy">, linear_cross_entropy_kernels {
  static constexpr op_traits traits{.writes_fresh = true,
                                    .backward_reads = 0,  // the saved gradients only
                                    .saved_elements = &linear_cross_entropy_saved,
                                    .saved_only_for_backward = true,
                                    .fused = true,
                                    .reads_int8_weight = &linear_cross_entropy_reads_int8};
};

}  // namespace loom::ops
