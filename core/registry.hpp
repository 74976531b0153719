// The kernels the executor runs for an op: the op entry's own, unless a test has replaced
// one (tests/support/corruption.cpp breaks a backward on purpose to prove that gradcheck
// notices). Private to the library and its test support.
#pragma once

#include "loom/core/op_entry.hpp"

namespace loom::detail {

/// The kernels of `op` in scalar type T, with any test override applied.
template <class T>
op_kernels<T> kernels_for(const op_entry& op);

/// Test seam: while set (non-null), executors constructed afterwards run `backward` as op's
/// backward in double. Not thread-safe with executors being constructed.
void set_backward_override(const op_entry& op, kernel_fn<double> backward);

}  // namespace loom::detail
