// The definitions of compiled_kernels<D> (core/op_entry.hpp): each calls the kernel that D's
// .cpp defines, forward_kernel(D, args) or backward_kernel(D, args), found by argument-dependent
// lookup. Include this header in that .cpp only; the `extern template` line beside D's
// declaration keeps every other translation unit (including another op's .cpp that includes
// this header too) from instantiating these for D.
#pragma once

#include "loom/core/kernel.hpp"
#include "loom/core/op_entry.hpp"

namespace loom {

template <class D>
void compiled_kernels<D>::forward(const op_args<float>& a) {
  forward_kernel(D{}, a);
}
template <class D>
void compiled_kernels<D>::forward(const op_args<double>& a) {
  forward_kernel(D{}, a);
}
template <class D>
void compiled_kernels<D>::backward(const op_args<float>& a) {
  backward_kernel(D{}, a);
}
template <class D>
void compiled_kernels<D>::backward(const op_args<double>& a) {
  backward_kernel(D{}, a);
}

}  // namespace loom
