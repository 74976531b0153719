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

#include "kernel.hpp"

namespace loom::ops {

/// What the rewrite found: the activation after the bias.
struct linear_params {
  enum act_t : std::uint8_t { none, relu, gelu } act = none;
  bool residual = false;  // input 3 is added to the output (act is none)
};

template <class T>
struct linear_kernel {  // ops/linear.cpp
  static void forward(const op_args<T>& a);
  static void backward(const op_args<T>& a);
};

/// gelu saves z for its backward; relu's backward needs a workspace for dz; both the node's size.
std::int64_t linear_output_elements(const void* params, const dims_t& out, std::span<const dims_t> in);

inline constexpr op_entry linear_entry{
    .name = "linear",
    .id = 26,
    .f32 = kernels_of<linear_kernel, float>(),
    .f64 = kernels_of<linear_kernel, double>(),
    .writes_fresh = true,
    .backward_reads = reads({0, 1}),
    .fused = true,
};
LOOM_REGISTER_OP(linear_entry);

inline constexpr op_entry linear_relu_entry{
    .name = "linear_relu",
    .id = 27,
    .f32 = kernels_of<linear_kernel, float>(),
    .f64 = kernels_of<linear_kernel, double>(),
    .writes_fresh = true,
    .backward_reads = reads({0, 1}),
    .backward_reads_output = true,
    .scratch_elements = &linear_output_elements,
    .fused = true,
};
LOOM_REGISTER_OP(linear_relu_entry);

inline constexpr op_entry linear_gelu_entry{
    .name = "linear_gelu",
    .id = 28,
    .f32 = kernels_of<linear_kernel, float>(),
    .f64 = kernels_of<linear_kernel, double>(),
    .writes_fresh = true,
    .backward_reads = reads({0, 1}),
    .saved_elements = &linear_output_elements,
    .fused = true,
};
LOOM_REGISTER_OP(linear_gelu_entry);

inline constexpr op_entry linear_residual_entry{
    .name = "linear_residual",
    .id = 29,
    .f32 = kernels_of<linear_kernel, float>(),
    .f64 = kernels_of<linear_kernel, double>(),
    .writes_fresh = true,
    // dr = dy, written last: r's gradient may be dy's own buffer
    .backward_in_place = true,
    .backward_in_place_input = 3,
    .backward_reads = reads({0, 1}),
    .fused = true,
};
LOOM_REGISTER_OP(linear_residual_entry);

}  // namespace loom::ops
