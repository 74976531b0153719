// linear (fused): the pattern  act(add(matmul(x, wᵀ), b))  — nn::linear, and its activation
// when one follows — run as one node (a plan rewrite: ops/linear_fusion.cpp finds it):
//
//   x [.., K], w [N, K], b [N] -> y [.., N] = act(z),  z = x wᵀ + b,  act: none, relu or gelu
//   forward: per chunk of rows, one GEMM, then the bias and the activation while the rows are
//            in cache (an epilogue: no separate pass over memory for each)
//   backward: dz = dy ⊙ act'(z) (relu: from y; gelu: from z, saved by forward),
//             db (+)= Σ_rows dz,  dx (+)= dz w,  dw (+)= dzᵀ x
// With a residual (a Transformer sublayer's  r + linear(h),  either order; no activation):
//   x, w, b, r [.., N] -> y = (x wᵀ + b) + r   (the same bits as the two adds: a + b = b + a)
//   backward: as above with dz = dy, and dr (+)= dy (after the others: r may be x or w)
// Four entries, one per activation and the residual, so that each declares exactly what its
// backward reads (the residual's value: never).
#pragma once

#include "loom/core/kernel.hpp"

namespace loom::ops {

/// What the rewrite found: the activation after the bias.
struct linear_params {
  enum act_t : std::uint8_t { none, relu, gelu } act = none;
  bool residual = false;  // input 3 is added to the output (act is none)
};

/// The kernels of the four fused linear ops (ops/linear.cpp): their parameters say which.
struct linear_kernels {
  template <class T>
  static void forward(const op_args<T>& a);
  template <class T>
  static void backward(const op_args<T>& a);
};

/// gelu saves z for its backward; relu's backward needs a workspace for dz; both the node's size.
std::int64_t linear_output_elements(const void* params, const dims_t& out, std::span<const dims_t> in);

struct linear_op : op_def<linear_op>, linear_kernels {
  static constexpr std::string_view name = "linear";
  static constexpr op_traits traits{
      .writes_fresh = true,
      .backward_reads = reads({0, 1}),
      .fused = true,
  };
};

struct linear_relu_op : op_def<linear_relu_op>, linear_kernels {
  static constexpr std::string_view name = "linear_relu";
  static constexpr op_traits traits{
      .writes_fresh = true,
      .backward_reads = reads({0, 1}),
      .backward_reads_output = true,
      .scratch_elements = &linear_output_elements,
      .fused = true,
  };
};

struct linear_gelu_op : op_def<linear_gelu_op>, linear_kernels {
  static constexpr std::string_view name = "linear_gelu";
  static constexpr op_traits traits{
      .writes_fresh = true,
      .backward_reads = reads({0, 1}),
      .saved_elements = &linear_output_elements,
      .fused = true,
  };
};

struct linear_residual_op : op_def<linear_residual_op>, linear_kernels {
  static constexpr std::string_view name = "linear_residual";
  static constexpr op_traits traits{
      .writes_fresh = true,
      // dr = dy, written last: r's gradient may be dy's own buffer
      .backward_in_place = true,
      .backward_in_place_input = 3,
      .backward_reads = reads({0, 1}),
      .fused = true,
  };
};

}  // namespace loom::ops
