// GCC's vector extension as one alias: gcc_vector<T, Bytes> holds Bytes / sizeof(T) lanes of T,
// and arithmetic, comparisons, selects and subscripts act on every lane. The kernels write
// their lane loops with it (fused attention's lanes, vmath's maxima, reduce's column tiles,
// greedy decoding's arg-max); the target of the function it is used in decides the
// instructions (vector_isa.hpp).
#pragma once

#include <cstddef>

namespace loom::ops {

template <class T, std::size_t Bytes>
struct gcc_vector_of {
  typedef T type __attribute__((vector_size(Bytes)));
};
template <class T, std::size_t Bytes>
using gcc_vector = typename gcc_vector_of<T, Bytes>::type;

}  // namespace loom::ops
