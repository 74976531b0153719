// checkpoint: marks a block's output as the point from which its interior is recomputed in
// backward instead of kept (gradient checkpointing, Chen et al. 2016).
//
//   checkpoint(y, x...) = y      y: the block's output; x...: the block's inputs
//   backward: dy flows to y unchanged; x... get nothing from it
//
// The value is y's buffer (a view). With exec_options::recompute (the default), the values
// that backward needs inside the block — the nodes y depends on that do not come before the
// inputs x... — are dropped after forward and computed again, once per block, just before the
// block's backward begins: less memory for one more forward of the block.
#pragma once

#include <tuple>

#include "loom/core/node.hpp"

namespace loom {

/// True when a checkpoint's operands are all graph nodes.
template <class... X>
inline constexpr bool checkpoint_operands = (is_node<X> && ...);

/// checkpoint(y, x...) has y's shape: op_def's default rule (input 0's shape).
struct checkpoint_op
    : op_def<checkpoint_op, "checkpoint", op_traits{.is_view = true, .writes_fresh = true, .bounds_recompute = true}>,
      compiled_kernels<checkpoint_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
extern template struct compiled_kernels<checkpoint_op>;  // ops/checkpoint.cpp

/// y, marked as the output of a block whose inputs are x...: with exec_options::recompute the
/// block's interior values are recomputed in backward instead of kept (see above).
template <class Y, class... X>
constexpr node<checkpoint_op, Y, X...> checkpoint(Y, X...) {
  static_assert(checkpoint_operands<Y, X...>, "checkpoint(y, x...): y and the inputs x... must be graph nodes");
  return {};
}

}  // namespace loom
