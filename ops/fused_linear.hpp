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

/// What the four share: a fused node that writes its output fresh and whose backward reads x and w.
inline constexpr op_traits linear_traits{.writes_fresh = true, .backward_reads = reads({0, 1}), .fused = true};

/// Every fused linear multiplies by its weight, input 1, transposed (op_traits::reads_int8_weight).
constexpr bool linear_reads_int8_weight(const node_desc&) { return true; }

/// linear_traits changed by f (an activation's or the residual's own needs), reading int8
/// weights (a member: GCC takes no function's address inside a template argument).
template <class F>
constexpr op_traits linear_traits_and(F f) {
  op_traits t = linear_traits;
  t.reads_int8_weight = &linear_reads_int8_weight;
  f(t);
  return t;
}

struct linear_op : op_def<linear_op, "linear">, linear_kernels {
  static constexpr op_traits traits = linear_traits_and([](op_traits&) {});
};

struct linear_relu_op : op_def<linear_relu_op, "linear_relu">, linear_kernels {
  // relu' comes from y; dz needs a workspace of the output's size
  static constexpr op_traits traits = linear_traits_and([](op_traits& t) {
    t.backward_reads_output = true;
    t.scratch_elements = &linear_output_elements;
  });
};

struct linear_gelu_op : op_def<linear_gelu_op, "linear_gelu">, linear_kernels {
  // gelu' comes from z, which forward saves
  static constexpr op_traits traits =
      linear_traits_and([](op_traits& t) { t.saved_elements = &linear_output_elements; });
};

struct linear_residual_op : op_def<linear_residual_op, "linear_residual">, linear_kernels {
  // dr = dy, written last: r's gradient may be dy's own buffer
  static constexpr op_traits traits = linear_traits_and([](op_traits& t) {
    t.backward_in_place = true;
    t.backward_in_place_input = 3;
  });
};

}  // namespace loom::ops
