// The interface between the executor and the op kernels (private to the library).
//
// A kernel sees plain pointers and run-time dims, never node types: it is compiled once per
// scalar type. forward() writes the node's value; backward() *accumulates* (+=) into the
// gradient of each input that needs one (din[i] != nullptr), reading dout and, where useful,
// the inputs and the node's own value.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <type_traits>

#include "loom/core/node_desc.hpp"
#include "loom/core/tensor.hpp"

namespace loom::ops {

template <class T>
struct op_args {
  const node_desc* node = nullptr;
  std::span<const void* const> in;  // input values; real-valued ones point to T
  std::span<const dims_t> in_dims;
  // elements between consecutive matrices (last two axes) of each input; equal to
  // rows · cols for contiguous inputs. Only ops whose reads_strided() says so see others.
  std::span<const std::int64_t> in_mat_stride;
  T* out = nullptr;  // the node's value (written by forward, read-only in backward)
  dims_t out_dims;
  // elements between the output's matrices when it is not contiguous: only for an op that
  // appends to its input 0's storage in place (op_entry::appends_to_input; then out is
  // input(0)); 0 otherwise
  std::int64_t out_mat_stride = 0;
  std::array<std::int64_t, 2> dattr{};  // the node's dim attributes, bound
  const T* dout = nullptr;              // backward: gradient of the node's value
  std::span<T* const> din;              // backward: gradients to accumulate into, or nullptr
  // backward: 1 where din[i] has not been written yet (its first contribution): a kernel
  // whose op_entry::writes_fresh is set then stores (=) instead of adding (+=), and the
  // executor does not zero that buffer first. Other kernels always see 0 here.
  std::span<const std::uint8_t> din_fresh;
  bool training = true;
  // a fused node's parameters, made by the plan rewrite that created it (op_entry::fused)
  const void* fused = nullptr;
  // the buffer forward writes for backward (op_entry::saved_elements), or nullptr
  T* saved = nullptr;
  // backward's workspace (op_entry::scratch_elements), or nullptr
  T* scratch = nullptr;

  template <class U = T>
  const U* input(int i) const {
    return static_cast<const U*>(in[static_cast<std::size_t>(i)]);
  }
  T* grad(int i) const { return din[static_cast<std::size_t>(i)]; }
  bool fresh(int i) const { return !din_fresh.empty() && din_fresh[static_cast<std::size_t>(i)] != 0; }
  /// Elements between consecutive matrices of input i (rows · cols when contiguous).
  std::int64_t mat_stride(int i) const {
    if (in_mat_stride.empty()) {
      const dims_t& d = in_dims[static_cast<std::size_t>(i)];
      return d.rank >= 2 ? d[-2] * d[-1] : d.size();
    }
    return in_mat_stride[static_cast<std::size_t>(i)];
  }
  /// The node's attributes, as its op's typed attribute struct (say matmul_attrs).
  template <class A>
  A attrs() const {
    return load_attrs<A>(*node);
  }
};

/// Calls f(std::true_type) when `fresh`, else f(std::false_type): kernels write their loops
/// once with `put<Fresh>(dst, value)` and get a store or an accumulation without a branch.
template <class F>
void with_fresh(bool fresh, F&& f) {
  if (fresh) f(std::true_type{});
  else f(std::false_type{});
}
template <bool Fresh, class T>
inline void put(T& dst, T value) {
  if constexpr (Fresh) dst = value;
  else dst += value;
}

}  // namespace loom::ops
