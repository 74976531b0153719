// pointwise: a unary elementwise op made from a scalar function f and its derivative df.
//
//   y = f(x),  elementwise, same shape
//   backward: dx = dy · df(x, y)
//
//   struct softsign_op : loom::pointwise<softsign_op> {
//     static constexpr std::string_view name = "softsign";
//     template <class T> static T f(T x) { return x / (1 + std::abs(x)); }
//     template <class T> static T df(T x, T /*y*/) { return 1 / ((1 + std::abs(x)) * (1 + std::abs(x))); }
//   };
//   inline constexpr loom::op_fn<softsign_op> softsign{};
//
// The second template argument says which values df reads, so that the memory planner keeps
// only those for backward: pointwise_reads::input (x, the default), ::output (y: exp, tanh,
// sigmoid), ::both, or ::none (neg). df is called with the value it does not read set to 0.
// The kernels are defined below, out of the class: a user's op is compiled in the user's
// translation unit; the library's own (unary.hpp) are declared `extern template struct
// pointwise<...>` there and compiled once in ops/unary.cpp.
#pragma once

#include <cstdint>

#include "loom/core/kernel.hpp"
#include "loom/core/node.hpp"
#include "loom/core/parallel.hpp"

namespace loom {

/// Which values a pointwise op's derivative df(x, y) reads.
enum class pointwise_reads : std::uint8_t { none, input, output, both };

/// The base of a unary elementwise op D (derives from op_def<D>): D supplies `name`, `f(x)`
/// and `df(x, y)` (dy/dx at x, y = f(x)); this supplies its traits, its shape rule (the
/// output has x's shape) and its forward and backward kernels.
template <class D, pointwise_reads R = pointwise_reads::input>
struct pointwise : op_def<D> {
  static constexpr bool reads_x = R == pointwise_reads::input || R == pointwise_reads::both;
  static constexpr bool reads_y = R == pointwise_reads::output || R == pointwise_reads::both;
  static constexpr op_traits traits = in_place_traits_reading(reads_x ? reads({0}) : input_set{0}, reads_y);
  /// y = f(x) over every element. (One function per scalar type, not a template, so that an
  /// explicit instantiation of pointwise<D, R> compiles them all.)
  static void forward(const op_args<float>& a);
  static void forward(const op_args<double>& a);
  /// dx (= when fresh, += otherwise) dy · df(x, y) over every element.
  static void backward(const op_args<float>& a);
  static void backward(const op_args<double>& a);

 private:
  template <class T>
  static void forward_elements(const op_args<T>& a);
  template <class T>
  static void backward_elements(const op_args<T>& a);
};

namespace detail {
/// Elements per parallel chunk of a pointwise kernel: large enough that a chunk outweighs the
/// cost of scheduling it, for a cheap f (a handful of operations per element).
inline constexpr std::int64_t pointwise_grain = 1 << 14;
}  // namespace detail

// Out of the class, so not inline: `extern template struct pointwise<...>` then keeps the
// library's kernels out of its users' translation units.
template <class D, pointwise_reads R>
void pointwise<D, R>::forward(const op_args<float>& a) {
  forward_elements(a);
}
template <class D, pointwise_reads R>
void pointwise<D, R>::forward(const op_args<double>& a) {
  forward_elements(a);
}
template <class D, pointwise_reads R>
void pointwise<D, R>::backward(const op_args<float>& a) {
  backward_elements(a);
}
template <class D, pointwise_reads R>
void pointwise<D, R>::backward(const op_args<double>& a) {
  backward_elements(a);
}

template <class D, pointwise_reads R>
template <class T>
void pointwise<D, R>::forward_elements(const op_args<T>& a) {
  const T* x = a.input(0);  // may be y itself (in place): each element is read before written
  T* y = a.out;
  for_chunks(a.out_dims.size(), detail::pointwise_grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) y[i] = D::f(x[i]);
  });
}

template <class D, pointwise_reads R>
template <class T>
void pointwise<D, R>::backward_elements(const op_args<T>& a) {
  T* dx = a.grad(0);
  if (!dx) return;
  const T* x = reads_x ? a.input(0) : nullptr;
  const T* y = reads_y ? a.out : nullptr;
  const T* dy = a.dout;  // may be dx itself (backward in place)
  with_fresh(a.fresh(0), [&](auto fresh) {
    for_chunks(a.out_dims.size(), detail::pointwise_grain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const T xi = reads_x ? x[i] : T(0), yi = reads_y ? y[i] : T(0);
        put<fresh()>(dx[i], dy[i] * D::df(xi, yi));
      }
    });
  });
}

}  // namespace loom
