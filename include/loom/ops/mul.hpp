// mul: y = a ⊙ b, broadcast (NumPy's rule, core/broadcast.hpp): a scale [D] on [B, T, D], [B, T, 1]
// ⊙ [B, T, D].
//   backward: da = dy ⊙ b summed over the axes a broadcasts along;  db = dy ⊙ a likewise.
#pragma once

#include "loom/core/node.hpp"
#include "loom/ops/add.hpp"

namespace loom {

struct mul_op : op_def<mul_op, "mul", op_traits{.can_run_in_place = true, .backward_reads = reads({0, 1})}>,
                compiled_kernels<mul_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class A, class B> using rule = broadcast_rule<mul_op, A, B>;
};
extern template struct compiled_kernels<mul_op>;  // ops/mul.cpp

/// a ⊙ b elementwise, the two broadcast together (NumPy's rule). Shapes that do not broadcast
/// do not compile (the message names both).
inline constexpr op_fn<mul_op> mul{};

/// a ⊙ b for nodes (mul).
template <class A, class B>
  requires(is_node<A> && is_node<B>)
constexpr auto operator*(A a, B b) {
  return detail::higher_rank_first(mul, a, b);
}

}  // namespace loom
