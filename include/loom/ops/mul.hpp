// mul: y = a ⊙ b, where b's shape is a's or a suffix of it (a scale [D] on [B, T, D]).
//   backward: da = dy ⊙ b;  db = Σ over the axes b lacks of dy ⊙ a.
#pragma once

#include "loom/core/node.hpp"
#include "loom/ops/add.hpp"

namespace loom {

namespace ops {
template <class T>
struct mul_kernel {  // ops/mul.cpp
  static void forward(const op_args<T>& a);
  static void backward(const op_args<T>& a);
};
}  // namespace ops

inline constexpr op_entry mul_entry{
    .name = "mul",
    .id = 13,
    .f32 = kernels_of<ops::mul_kernel, float>(),
    .f64 = kernels_of<ops::mul_kernel, double>(),
    .can_run_in_place = true,
    .backward_reads = reads({0, 1}),
};
LOOM_REGISTER_OP(mul_entry);

struct mul_op {
  static constexpr const op_entry& entry = mul_entry;
  template <class A, class B>
  struct rule {
    static_assert(is_shape_suffix<A, B>, "mul: the second operand's dims must equal the first's, or its trailing dims");
    using type = A;
  };
};

/// a ⊙ b elementwise, b broadcast over a's leading axes (b's shape is a suffix of a's).
template <class A, class B>
constexpr node<mul_op, A, B> mul(A, B) {
  return {};
}

/// a ⊙ b for nodes; the operand with fewer axes is broadcast.
template <class A, class B>
  requires(is_node<A> && is_node<B>)
constexpr auto operator*(A a, B b) {
  if constexpr (A::shape::rank >= B::shape::rank) return mul(a, b);
  else return mul(b, a);
}

}  // namespace loom
