// sub, div, maximum and minimum kernels: y = f(a, b), the two broadcast onto y (broadcast.hpp).
// See include/loom/ops/binary.hpp for the math.
//   backward: each operand's gradient summed over the axes it broadcasts along, in row-major
//             order (the same sums for any thread count)
#include <cstdint>

#include "broadcast.hpp"
#include "loom/core/compiled_kernels.hpp"
#include "loom/core/kernel.hpp"
#include "loom/core/parallel.hpp"
#include "loom/ops/binary.hpp"
#include "pass_gradient.hpp"

namespace loom {
using namespace ops;  // the kernels' helpers
namespace {

// whether u wins over v: larger for maximum, smaller for minimum; a NaN u always wins, so
// that NaN propagates (a NaN v wins because u does not)
template <bool Min, class T>
bool wins(T u, T v) {
  if constexpr (Min)
    return u < v || u != u;
  else
    return u > v || u != u;
}

template <bool Min, class T>
void extremum_forward(const op_args<T>& a) {
  broadcast_layout(a.out_dims, a.in_dims[0], a.in_dims[1]).elementwise(a.input(0), a.input(1), a.out, [](T u, T v) {
    return wins<Min>(u, v) ? u : v;
  });
}

// operand i's share of dy: all of it where it wins, half where the two are equal
template <bool Min, class T>
void extremum_backward(const op_args<T>& a) {
  const T* operand[2] = {a.input(0), a.input(1)};
  const T* dy = a.dout;
  const broadcast_layout l(a.out_dims, a.in_dims[0], a.in_dims[1]);
  // maximum(x, x) passes one gradient buffer twice: the two sums run one after the other
  for (int i = 0; i < 2; ++i) {
    T* d = a.grad(i);
    if (!d) continue;
    const T* own = operand[i];
    const T* other = operand[1 - i];
    l.reduce_into(i, d, a.fresh(i), [&](std::int64_t o, std::int64_t io, std::int64_t e) {
      const T u = own[e], v = other[io];
      return wins<Min>(u, v) ? dy[o] : u == v ? T(0.5) * dy[o] : T(0);
    });
  }
}

}  // namespace

template <class T>
void forward_kernel(sub_op, const op_args<T>& a) {
  broadcast_layout(a.out_dims, a.in_dims[0], a.in_dims[1]).elementwise(a.input(0), a.input(1), a.out, [](T u, T v) {
    return u - v;
  });
}

template <class T>
void backward_kernel(sub_op, const op_args<T>& a) {
  const T* dy = a.dout;
  const broadcast_layout l(a.out_dims, a.in_dims[0], a.in_dims[1]);
  // da may be dy's own buffer (backward in place): then it is dy already, and db reads dy
  // after it, unchanged. sub(x, x) passes one buffer twice: the sums run one after the other.
  if (T* da = a.grad(0)) {
    if (a.in_dims[0] == a.out_dims)
      pass_gradient(dy, da, a.out_dims.size(), a.fresh(0));
    else
      l.reduce_into(0, da, a.fresh(0), [&](std::int64_t o, std::int64_t) { return dy[o]; });
  }
  if (T* db = a.grad(1)) l.reduce_into(1, db, a.fresh(1), [&](std::int64_t o, std::int64_t) { return -dy[o]; });
}

template <class T>
void forward_kernel(div_op, const op_args<T>& a) {
  broadcast_layout(a.out_dims, a.in_dims[0], a.in_dims[1]).elementwise(a.input(0), a.input(1), a.out, [](T u, T v) {
    return u / v;
  });
}

template <class T>
void backward_kernel(div_op, const op_args<T>& a) {
  const T* x = a.input(0);  // the numerator
  const T* b = a.input(1);  // the denominator
  const T* dy = a.dout;
  const broadcast_layout l(a.out_dims, a.in_dims[0], a.in_dims[1]);
  if (T* dx = a.grad(0))
    l.reduce_into(0, dx, a.fresh(0), [&](std::int64_t o, std::int64_t ib) { return dy[o] / b[ib]; });
  if (T* db = a.grad(1))
    l.reduce_into(1, db, a.fresh(1),
                  [&](std::int64_t o, std::int64_t ix, std::int64_t e) { return -dy[o] * x[ix] / (b[e] * b[e]); });
}

template <class T>
void forward_kernel(maximum_op, const op_args<T>& a) {
  extremum_forward<false>(a);
}
template <class T>
void backward_kernel(maximum_op, const op_args<T>& a) {
  extremum_backward<false>(a);
}
template <class T>
void forward_kernel(minimum_op, const op_args<T>& a) {
  extremum_forward<true>(a);
}
template <class T>
void backward_kernel(minimum_op, const op_args<T>& a) {
  extremum_backward<true>(a);
}

template struct compiled_kernels<sub_op>;
template struct compiled_kernels<div_op>;
template struct compiled_kernels<maximum_op>;
template struct compiled_kernels<minimum_op>;

}  // namespace loom
