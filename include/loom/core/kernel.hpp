// The kernel interface: what an op's forward and backward kernels receive (op_args), for the
// library's ops and for ops a user declares in their own project (core/op_entry.hpp).
//
// A kernel sees plain pointers and run-time dims, never node types: it is compiled once per
// scalar type T (float and double). Its contract:
//   forward(a)   writes every element of a.out (a.out_dims), reading a.input(i) (a.in_dims[i]);
//                inputs are contiguous row-major unless the op's traits say reads_strided.
//   backward(a)  for each input i with a.grad(i) != nullptr, *accumulates* (+=) dL/d input i
//                into it, reading a.dout (dL/d out, a.out_dims) and the values its traits
//                declare (backward_reads: inputs; backward_reads_output: a.out). When the op's
//                traits say writes_fresh and a.fresh(i), it must store (=) instead: the buffer
//                holds garbage (with_fresh/put below write both forms from one loop).
//   check(a)     optional, at binding: throws loom::shape_error for run-time shape mistakes.
// One node may be several inputs of the same op (mul(x, x)): then grad(0) and grad(1) are the
// same buffer, and only the first position is fresh — handle the inputs in order, each one's
// contribution complete before the next one's starts.
// Kernels may run in parallel with other nodes' kernels and split their own work with
// for_chunks (core/parallel.hpp), whose chunks do not depend on the thread count, so results
// are bit-identical for any number of threads. A kernel throws only loom exceptions.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>

#include "loom/core/node_desc.hpp"
#include "loom/core/tensor.hpp"

namespace loom {

/// A weight matrix [rows, cols] quantized to int8 per row (output channel): W[j, k] ≈
/// scale[j] · at(j, k) (exec_options::weights = int8). The values lie in blocks of 16 rows, each
/// block a run of column pairs (k, k + 1), 32 bytes a pair: row c of the block at bytes 2c and
/// 2c + 1 — so that one 512-bit multiply takes a pair of x into 16 outputs at once. Columns are
/// padded with zeros to `padded_cols` (a multiple of 64), rows to a multiple of 16 (their scale 0).
struct int8_weights {
  const std::int8_t* q = nullptr;
  const float* scale = nullptr;
  std::int64_t rows = 0, cols = 0, padded_cols = 0;
  std::int8_t at(std::int64_t j, std::int64_t k) const {
    return q[((j / 16) * (padded_cols / 2) + k / 2) * 32 + (j % 16) * 2 + (k % 2)];
  }
};

/// What a kernel keeps from one forward() to the next for a weight that does not change between
/// them (exec_options::pack_weights): the weight copied into the layout its products read. The
/// kernel makes it at its first call, when `made` is empty, and reads it at later calls; the
/// executor empties it when the parameters may have changed (a layout change, requantize()).
/// Only the kernel of the node it belongs to reads or writes it (one call at a time).
struct kept_weight {
  std::shared_ptr<void> made;
};

/// What a kernel receives: its node, its inputs' values and dims, its output, and in
/// backward the output's gradient and its inputs' gradients. Pointers are valid for the call.
template <class T>
struct op_args {
  const node_desc* node = nullptr;
  std::span<const void* const> in;  // input values; real-valued ones point to T
  std::span<const dims_t> in_dims;
  // elements between consecutive matrices (last two axes) of each input; equal to
  // rows · cols for contiguous inputs. Only ops whose reads_strided() says so see others.
  std::span<const std::int64_t> in_mat_stride;
  T* out = nullptr;  // the node's value (written by forward, read-only in backward)
  dims_t out_dims;
  // elements between the output's matrices when it is not contiguous: only for an op that
  // appends to its input 0's storage in place (op_entry::appends_to_input; then out is
  // input(0)); 0 otherwise
  std::int64_t out_mat_stride = 0;
  std::array<std::int64_t, 2> dattr{};  // the node's dim attributes, bound
  const T* dout = nullptr;              // backward: gradient of the node's value
  std::span<T* const> din;              // backward: gradients to accumulate into, or nullptr
  // backward: 1 where din[i] has not been written yet (its first contribution): a kernel
  // whose op_entry::writes_fresh is set then stores (=) instead of adding (+=), and the
  // executor does not zero that buffer first. Other kernels always see 0 here.
  std::span<const std::uint8_t> din_fresh;
  bool training = true;
  /// Whether this node's backward will run after this forward: false in an inference executor
  /// and for a node no gradient reaches. A forward may skip what only its backward reads when
  /// it is false. (In forward, din is set as in backward: a kernel may test which inputs will
  /// get a gradient — non-null — but must not write there.)
  bool will_backward = true;
  /// GEMM-like products (matmul, the fused linear, fused attention) in bf16 with float accumulation
  /// (exec_options::precision); always false in double.
  bool bf16 = false;
  /// Set for a weight product whose weight (input 1, a parameter [N, K] read as Wᵀ) the executor
  /// quantized to int8 (exec_options::weights): matmul and the fused linear then read it instead
  /// of input(1). Null otherwise (always in double and in backward).
  const int8_weights* int8 = nullptr;
  /// Set in forward for a weight product (as int8 above) when the executor holds its weights
  /// unchanged between forward() calls (exec_options::pack_weights) and the node does not read
  /// int8: where its kernel may keep the weight in its products' layout. Null otherwise.
  kept_weight* kept = nullptr;
  // a fused node's parameters, made by the plan rewrite that created it (op_entry::fused)
  const void* fused = nullptr;
  // the buffer forward writes for backward (op_entry::saved_elements), or nullptr
  T* saved = nullptr;
  // backward's workspace (op_entry::scratch_elements), or nullptr
  T* scratch = nullptr;

  template <class U = T>
  const U* input(int i) const {
    return static_cast<const U*>(in[static_cast<std::size_t>(i)]);
  }
  T* grad(int i) const { return din[static_cast<std::size_t>(i)]; }
  bool fresh(int i) const { return !din_fresh.empty() && din_fresh[static_cast<std::size_t>(i)] != 0; }
  /// Elements between consecutive matrices of input i (rows · cols when contiguous).
  std::int64_t mat_stride(int i) const {
    if (in_mat_stride.empty()) {
      const dims_t& d = in_dims[static_cast<std::size_t>(i)];
      return d.rank >= 2 ? d[-2] * d[-1] : d.size();
    }
    return in_mat_stride[static_cast<std::size_t>(i)];
  }
  /// The node's attributes, as its op's typed attribute struct (say matmul_attrs).
  template <class A>
  A attrs() const {
    return load_attrs<A>(*node);
  }
};

/// Calls f(std::true_type) when `fresh`, else f(std::false_type): kernels write their loops
/// once with `put<Fresh>(dst, value)` and get a store or an accumulation without a branch.
template <class F>
void with_fresh(bool fresh, F&& f) {
  if (fresh) f(std::true_type{});
  else f(std::false_type{});
}
template <bool Fresh, class T>
inline void put(T& dst, T value) {
  if constexpr (Fresh) dst = value;
  else dst += value;
}

}  // namespace loom

namespace loom::ops {  // the library's kernels name these unqualified
using loom::op_args;
using loom::put;
using loom::with_fresh;
}  // namespace loom::ops
