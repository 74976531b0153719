// Views: where an operand's elements sit inside another node's buffer, so that a fused kernel
// reads q, k, v straight out of a packed projection and writes its output with the heads
// merged, instead of the graph copying them through slice and transpose nodes. Private.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "loom/core/tensor.hpp"

namespace loom::ops {

/// One step of a view, applied to the dims (and strides) it gets.
struct view_step {
  enum kind_t : std::uint8_t {
    slice,  // axis keeps [begin, begin + size)
    split,  // axis of n elements becomes two axes (n / size, size)
    permute  // axis i of the result is axis perm[i]
  } kind = slice;
  int axis = 0;
  std::int64_t begin = 0, size = 0;
  std::array<std::int8_t, max_rank> perm{};
};

/// The steps from the dims of the buffer's node to the operand, in order (none: the node itself).
using view_chain = std::vector<view_step>;

/// A strided view: element (i_0, .., i_{rank−1}) lies at offset + Σ i_k · stride[k].
struct strided_dims {
  int rank = 0;
  std::array<std::int64_t, max_rank> dims{}, stride{};
  std::int64_t offset = 0;
};

/// The view `chain` of a buffer of dims `base` whose matrices (last two axes) lie mat_stride
/// elements apart (0: contiguous). Throws error when a step does not fit the dims (a bug of the
/// rule that made the chain).
strided_dims apply_view(const view_chain& chain, const dims_t& base, std::int64_t mat_stride = 0);

}  // namespace loom::ops
