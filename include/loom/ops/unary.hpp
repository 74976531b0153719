// Unary elementwise math, each a pointwise op (pointwise.hpp): y = f(x), dx = dy · f'(x), same
// shape. With y the output:
//
//   neg(x)     = −x               f' = −1
//   exp(x)     = eˣ               f' = y
//   log(x)     = ln x             f' = 1 / x              (x ≤ 0: NaN or −∞, as std::log)
//   sqrt(x)    = √x               f' = 1 / (2y)           (+∞ at x = 0, as PyTorch)
//   rsqrt(x)   = 1 / √x           f' = −y³ / 2
//   tanh(x)                       f' = 1 − y²
//   sigmoid(x) = 1 / (1 + e⁻ˣ)    f' = y (1 − y)
//   abs(x)     = |x|              f' = sign(x), 0 at x = 0 (as PyTorch)
//   square(x)  = x²               f' = 2x
//
// Their names are those of <cmath>'s functions: inside namespace loom, and after `using
// namespace loom`, call the scalar ones as std::exp, std::log, ...
#pragma once

#include <cmath>

#include "loom/ops/pointwise.hpp"

namespace loom {

struct neg_op : pointwise<neg_op, pointwise_reads::none> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr std::string_view name = "neg";
  template <class T> static T f(T x) { return -x; }
  template <class T> static T df(T, T) { return T(-1); }
};

struct exp_op : pointwise<exp_op, pointwise_reads::output> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr std::string_view name = "exp";
  template <class T> static T f(T x) { return std::exp(x); }
  template <class T> static T df(T, T y) { return y; }
};

struct log_op : pointwise<log_op, pointwise_reads::input> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr std::string_view name = "log";
  template <class T> static T f(T x) { return std::log(x); }
  template <class T> static T df(T x, T) { return T(1) / x; }
};

struct sqrt_op : pointwise<sqrt_op, pointwise_reads::output> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr std::string_view name = "sqrt";
  template <class T> static T f(T x) { return std::sqrt(x); }
  template <class T> static T df(T, T y) { return T(0.5) / y; }
};

struct rsqrt_op : pointwise<rsqrt_op, pointwise_reads::output> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr std::string_view name = "rsqrt";
  template <class T> static T f(T x) { return T(1) / std::sqrt(x); }
  template <class T> static T df(T, T y) { return T(-0.5) * y * y * y; }
};

struct tanh_op : pointwise<tanh_op, pointwise_reads::output> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr std::string_view name = "tanh";
  template <class T> static T f(T x) { return std::tanh(x); }
  template <class T> static T df(T, T y) { return T(1) - y * y; }
};

struct sigmoid_op : pointwise<sigmoid_op, pointwise_reads::output> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr std::string_view name = "sigmoid";
  template <class T> static T f(T x) { return T(1) / (T(1) + std::exp(-x)); }
  template <class T> static T df(T, T y) { return y * (T(1) - y); }
};

struct abs_op : pointwise<abs_op, pointwise_reads::input> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr std::string_view name = "abs";
  template <class T> static T f(T x) { return std::abs(x); }
  template <class T> static T df(T x, T) { return x > T(0) ? T(1) : x < T(0) ? T(-1) : T(0); }
};

struct square_op : pointwise<square_op, pointwise_reads::input> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
  static constexpr std::string_view name = "square";
  template <class T> static T f(T x) { return x * x; }
  template <class T> static T df(T x, T) { return T(2) * x; }
};

/// −x, elementwise; same shape. Also `-x` for a node.
inline constexpr op_fn<neg_op> neg{};
/// eˣ, elementwise; same shape.
inline constexpr op_fn<exp_op> exp{};
/// The natural logarithm, elementwise; same shape (NaN below 0, −∞ at 0).
inline constexpr op_fn<log_op> log{};
/// √x, elementwise; same shape (NaN below 0).
inline constexpr op_fn<sqrt_op> sqrt{};
/// 1 / √x, elementwise; same shape (RMSNorm's scale: rsqrt(mean<-1, true>(x * x) + eps)).
inline constexpr op_fn<rsqrt_op> rsqrt{};
/// The hyperbolic tangent, elementwise; same shape.
inline constexpr op_fn<tanh_op> tanh{};
/// The logistic function 1 / (1 + e⁻ˣ), elementwise; same shape.
inline constexpr op_fn<sigmoid_op> sigmoid{};
/// |x|, elementwise; same shape. Its gradient at 0 is 0 (PyTorch's choice).
inline constexpr op_fn<abs_op> abs{};
/// x², elementwise; same shape.
inline constexpr op_fn<square_op> square{};

/// −x for a node (neg).
template <class X>
  requires is_node<X>
constexpr auto operator-(X x) {
  return neg(x);
}

// compiled once, in ops/unary.cpp
extern template struct pointwise<neg_op, pointwise_reads::none>;
extern template struct pointwise<exp_op, pointwise_reads::output>;
extern template struct pointwise<log_op, pointwise_reads::input>;
extern template struct pointwise<sqrt_op, pointwise_reads::output>;
extern template struct pointwise<rsqrt_op, pointwise_reads::output>;
extern template struct pointwise<tanh_op, pointwise_reads::output>;
extern template struct pointwise<sigmoid_op, pointwise_reads::output>;
extern template struct pointwise<abs_op, pointwise_reads::input>;
extern template struct pointwise<square_op, pointwise_reads::input>;

}  // namespace loom
