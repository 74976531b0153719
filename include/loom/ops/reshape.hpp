// reshape and transpose: rearranging axes (splitting and merging attention heads).
//
//   reshape<shape<...>>(x): same elements, new dims; the fixed sizes must have the same
//       product and the dynamic dims must be the same ones.  backward: dx = dy (reshaped).
//   transpose<P0, P1, ...>(x): y's axis i is x's axis P_i.  backward: dx = dyᵀ with the
//       inverse permutation.
#pragma once

#include <tuple>

#include <algorithm>
#include <array>

#include "loom/core/node.hpp"

namespace loom {

namespace detail {
struct size_signature {
  long fixed_product = 1;
  int n_dyn = 0;
  std::array<dim_expr, max_rank> dyn{};
};
template <class S>
constexpr size_signature size_signature_of() {
  size_signature sig;
  auto exprs = shape_exprs_of<S>();
  for (int i = 0; i < S::rank; ++i) {
    if (exprs[i].is_fixed()) sig.fixed_product *= exprs[i].constant;
    else sig.dyn[sig.n_dyn++] = exprs[i];
  }
  std::sort(sig.dyn.begin(), sig.dyn.begin() + sig.n_dyn, [](const dim_expr& a, const dim_expr& b) {
    if (a.n_syms != b.n_syms) return a.n_syms < b.n_syms;
    for (int k = 0; k < a.n_syms; ++k)
      if (a.syms[k] != b.syms[k]) return a.syms[k] < b.syms[k];
    return a.constant < b.constant;
  });
  return sig;
}
}  // namespace detail

/// True when a reshape from From to To keeps the number of elements for every binding.
template <class From, class To>
inline constexpr bool reshape_preserves_size = [] {
  auto a = detail::size_signature_of<From>();
  auto b = detail::size_signature_of<To>();
  if (a.fixed_product != b.fixed_product || a.n_dyn != b.n_dyn) return false;
  for (int i = 0; i < a.n_dyn; ++i)
    if (!(a.dyn[i] == b.dyn[i])) return false;
  return true;
}();

/// reshape's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct reshape_def : op_def<reshape_def, "reshape", op_traits{.is_view = true, .writes_fresh = true}>,
                     compiled_kernels<reshape_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
extern template struct compiled_kernels<reshape_def>;  // ops/reshape.cpp

template <class To>
struct reshape_op : reshape_def {
  template <class S>
  struct rule {
    static_assert(reshape_preserves_size<S, To>,
                  "reshape: the new shape has a different number of elements (or other dynamic dims)");
    using type = To;
  };
};

/// The same elements under new dims (row-major order is kept).
template <class To, class X>
constexpr node<reshape_op<To>, X> reshape(X) {
  static_assert(is_shape<To>, "reshape<To>: To must be loom::shape<...>");
  return {};
}

/// True when P... is a permutation of 0 .. rank-1.
template <int Rank, int... P>
inline constexpr bool is_permutation = [] {
  if (sizeof...(P) != static_cast<std::size_t>(Rank)) return false;
  std::array<int, sizeof...(P)> p{P...};
  std::array<bool, sizeof...(P)> seen{};
  for (int v : p) {
    if (v < 0 || v >= Rank || seen[static_cast<std::size_t>(v)]) return false;
    seen[static_cast<std::size_t>(v)] = true;
  }
  return true;
}();

/// transpose's attributes (stored in its node's descriptor, read by its kernels).
struct transpose_attrs {
  std::array<long, max_rank> perm{};  // y's axis i is x's axis perm[i]
};

/// transpose's declaration: name, traits and kernels (compiled once, whatever the attributes).
struct transpose_def : op_def<transpose_def, "transpose", op_traits{.writes_fresh = true}>,
                       compiled_kernels<transpose_def> {
  /// Written as ONNX (core/onnx_mapping.hpp; the library's mappings: ops/onnx_mappings.cpp).
  static std::string to_onnx(onnx_emitter& e);
};
extern template struct compiled_kernels<transpose_def>;  // ops/reshape.cpp

template <int... P>
struct transpose_op : transpose_def {
  static constexpr transpose_attrs attrs{std::array<long, max_rank>{P...}};
  template <class S>
  struct rule {
    static_assert(is_permutation<S::rank, P...>, "transpose: the axes must be a permutation of 0 .. rank-1");
    using type = std::conditional_t<is_permutation<S::rank, P...>,
                                    shape<dim_at<S, (P < S::rank ? P : 0)>...>, S>;
  };
};

/// Permutes the axes: y's axis i is x's axis P_i (`transpose<0, 2, 1, 3>` swaps T and heads).
template <int... P, class X>
constexpr node<transpose_op<P...>, X> transpose(X) {
  return {};
}

}  // namespace loom

// Reflection of the attributes (descriptor slots, structural hash, DOT label).
BOOST_HANA_ADAPT_STRUCT(loom::transpose_attrs, perm);
