// Binary elementwise math with NumPy's broadcasting (core/broadcast.hpp), as add and mul. Each
// operand's gradient is summed over the axes it broadcasts along (in row-major order).
//
//   sub(a, b)     = a − b        da = dy                    db = −dy
//   div(a, b)     = a / b        da = dy / b                db = −dy · a / b²
//   maximum(a, b) = max(a, b)    da = dy · [a > b]          db = dy · [b > a]
//   minimum(a, b) = min(a, b)    da = dy · [a < b]          db = dy · [b < a]
//
// maximum and minimum give each operand half of dy where a = b (PyTorch's rule), and NaN where
// either operand is NaN (as torch.maximum).
#pragma once

#include "loom/core/broadcast.hpp"
#include "loom/core/node.hpp"

namespace loom {

struct sub_op : op_def<sub_op, "sub", in_place_traits>, compiled_kernels<sub_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class A, class B> using rule = broadcast_rule<sub_op, A, B>;
};
extern template struct compiled_kernels<sub_op>;  // ops/binary.cpp

namespace detail {
/// The traits of div, maximum and minimum: forward may run in place, backward stores its
/// first contribution and reads both operands.
inline constexpr op_traits binary_traits_reading_operands{
    .writes_fresh = true, .can_run_in_place = true, .backward_reads = reads({0, 1})};
}  // namespace detail

struct div_op : op_def<div_op, "div", detail::binary_traits_reading_operands>, compiled_kernels<div_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class A, class B> using rule = broadcast_rule<div_op, A, B>;
};
extern template struct compiled_kernels<div_op>;  // ops/binary.cpp

struct maximum_op : op_def<maximum_op, "maximum", detail::binary_traits_reading_operands>,
                    compiled_kernels<maximum_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class A, class B> using rule = broadcast_rule<maximum_op, A, B>;
};
extern template struct compiled_kernels<maximum_op>;  // ops/binary.cpp

struct minimum_op : op_def<minimum_op, "minimum", detail::binary_traits_reading_operands>,
                    compiled_kernels<minimum_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class A, class B> using rule = broadcast_rule<minimum_op, A, B>;
};
extern template struct compiled_kernels<minimum_op>;  // ops/binary.cpp

/// a − b elementwise, the two broadcast together (NumPy's rule); also `a - b` for nodes.
/// Shapes that do not broadcast do not compile.
inline constexpr op_fn<sub_op> sub{};

/// a / b elementwise, broadcast (NumPy's rule); also `a / b` for nodes. Division by 0 gives
/// ±∞ or NaN (IEEE), as PyTorch. After `using namespace loom`, <cstdlib>'s div is ambiguous
/// with this one: write loom::div or a / b.
inline constexpr op_fn<div_op> div{};

/// max(a, b) elementwise, broadcast (torch.maximum): a tie gives each operand half the
/// gradient; NaN in either operand gives NaN.
inline constexpr op_fn<maximum_op> maximum{};

/// min(a, b) elementwise, broadcast (torch.minimum): ties and NaN as maximum.
inline constexpr op_fn<minimum_op> minimum{};

/// a − b for nodes (sub).
template <class A, class B>
  requires(is_node<A> && is_node<B>)
constexpr auto operator-(A a, B b) {
  return sub(a, b);
}

/// a / b for nodes (div).
template <class A, class B>
  requires(is_node<A> && is_node<B>)
constexpr auto operator/(A a, B b) {
  return div(a, b);
}

}  // namespace loom
