// dx (+)= dy over a whole buffer: the backward of every op whose gradient passes through
// unchanged (add, the residual of a fused linear, named, checkpoint, positional encoding).
// Private to the kernels.
#pragma once

#include <cstdint>

#include "loom/core/kernel.hpp"
#include "loom/core/parallel.hpp"
#include "vector_isa.hpp"

namespace loom::ops {

/// Elements [i0, i1) of dx (= when Fresh, += otherwise) dy, compiled per vector width (a loop
/// written in a for_chunks lambda is the baseline ISA's). dx may be dy itself (an op whose
/// backward runs in place adds dy to itself for a second contribution): no __restrict.
template <class T, bool Fresh>
LOOM_VECTOR_CLONES void pass_gradient_range(const T* dy, T* dx, std::int64_t i0, std::int64_t i1) {
  for (std::int64_t i = i0; i < i1; ++i) put<Fresh>(dx[i], dy[i]);
}

/// dx[0, n) (= when fresh, += otherwise) dy[0, n), in parallel chunks. Nothing to do when dx
/// is dy and fresh (a backward in place whose first contribution is dy itself: add's, the fused
/// linear's residual).
template <class T>
void pass_gradient(const T* dy, T* dx, std::int64_t n, bool fresh) {
  if (fresh && dx == dy) return;
  with_fresh(fresh, [&](auto f) {
    for_chunks(n, 1 << 15, [&](std::int64_t i0, std::int64_t i1) { pass_gradient_range<T, f()>(dy, dx, i0, i1); });
  });
}

}  // namespace loom::ops
