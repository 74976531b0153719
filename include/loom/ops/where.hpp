// where: y = cond ? a : b, elementwise, the three broadcast together (NumPy's rule,
// core/broadcast.hpp; torch.where).
//
//   cond  bool (uint8) input;  a, b  real
//   backward: da = dy · [cond]  and  db = dy · [¬cond], each summed over the axes its operand
//             broadcasts along; cond gets no gradient.
#pragma once

#include "loom/core/broadcast.hpp"
#include "loom/core/node.hpp"

namespace loom {

struct where_op : op_def<where_op, "where", op_traits{.writes_fresh = true, .backward_reads = reads({0})}>,
                  compiled_kernels<where_op> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  template <class C, class A, class B>
  struct rule {
    static_assert(shapes_broadcast<A, B>,
                  "where: a and b do not broadcast (aligned at the last axis, each pair of dims must be equal or "
                  "one of them 1)");
    static_assert(shapes_broadcast<C, broadcast_shape<A, B>>,
                  "where: cond does not broadcast with a and b (aligned at the last axis, each pair of dims must "
                  "be equal or one of them 1)");
    using type = broadcast_shape<C, broadcast_shape<A, B>>;
  };
};
extern template struct compiled_kernels<where_op>;  // ops/where.cpp

/// cond ? a : b elementwise (torch.where): cond a bool input, a and b real, the three
/// broadcast together. The gradient flows to a where cond holds and to b elsewhere.
template <class C, class A, class B>
  requires(is_node<C> && is_node<A> && is_node<B>)
constexpr node<where_op, C, A, B> where(C, A, B) {
  static_assert(desc_of<resolve_t<C>>.elem == dtype::u8, "where: cond must be a bool input (input<Name, Shape, bool>)");
  static_assert(desc_of<resolve_t<A>>.elem == dtype::real && desc_of<resolve_t<B>>.elem == dtype::real,
                "where: a and b must be real-valued");
  return {};
}

}  // namespace loom
