// An op of this project whose kernels are compiled once, in own_ops.cpp, through
// loom::compiled_kernels: the form loom's own ops use (docs/extending.md).
//
//   cube(x): y = x³, elementwise;  backward: dx (+)= dy · 3x².
#pragma once

#include "loom/loom.hpp"

namespace consumer {

struct cube_op : loom::op_def<cube_op, "consumer.cube",
                              loom::op_traits{.writes_fresh = true, .backward_reads = loom::reads({0})}>,
                 loom::compiled_kernels<cube_op> {};
inline constexpr loom::op_fn<cube_op> cube{};

}  // namespace consumer

extern template struct loom::compiled_kernels<consumer::cube_op>;  // own_ops.cpp
