// Declarations of every op's kernels (defined one op per file in ops/, compiled once per
// scalar type, collected into the dispatch table by registry.cpp).
#pragma once

#include "kernel.hpp"

namespace loom::ops {

#define LOOM_KERNEL(op)                          \
  template <class T>                             \
  struct op##_kernel {                           \
    static void forward(const op_args<T>& a);    \
    static void backward(const op_args<T>& a);   \
  };
#define LOOM_FRESH_KERNEL(op)                    \
  template <class T>                             \
  struct op##_kernel {                           \
    static constexpr bool writes_fresh = true;   \
    static void forward(const op_args<T>& a);    \
    static void backward(const op_args<T>& a);   \
  };
#define LOOM_CHECKED_KERNEL(op)                  \
  template <class T>                             \
  struct op##_kernel {                           \
    static void forward(const op_args<T>& a);    \
    static void backward(const op_args<T>& a);   \
    static void check(const op_args<T>& a);      \
  };

LOOM_FRESH_KERNEL(matmul)
LOOM_FRESH_KERNEL(scale)
LOOM_FRESH_KERNEL(mask_causal)
LOOM_FRESH_KERNEL(mask_padding)
LOOM_FRESH_KERNEL(mask_bool)
LOOM_FRESH_KERNEL(softmax)
template <class T>
struct concat_kernel {
  static constexpr bool writes_fresh = true;
  static void forward(const op_args<T>& a);
  static void backward(const op_args<T>& a);
  static bool reads_strided(const node_desc* node, int input);  // along the last two axes
};
LOOM_CHECKED_KERNEL(slice)
LOOM_FRESH_KERNEL(reshape)
LOOM_FRESH_KERNEL(transpose)
LOOM_FRESH_KERNEL(add)
LOOM_KERNEL(sum)
LOOM_KERNEL(mul)
LOOM_KERNEL(embedding)
LOOM_FRESH_KERNEL(positional_encoding)
LOOM_FRESH_KERNEL(layer_norm)
LOOM_FRESH_KERNEL(relu)
LOOM_KERNEL(gelu)
LOOM_KERNEL(dropout)
LOOM_FRESH_KERNEL(cross_entropy)

#undef LOOM_KERNEL
#undef LOOM_CHECKED_KERNEL
#undef LOOM_FRESH_KERNEL

}  // namespace loom::ops
