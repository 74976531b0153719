// Where a broadcast mask's elements lie, seen from the scores it masks (private; shared by the
// mask kernels and the fused attention).
#pragma once

#include <array>
#include <cstdint>

#include "loom/core/tensor.hpp"

namespace loom::ops {

/// The stride of a mask of dims `mask` along each axis of scores of rank `score_rank` (0 where
/// the mask broadcasts: an axis it lacks or has of size 1). The mask aligns at the last axis,
/// except its first `lead` axes, which align with the scores' first axes (mask_bool<Lead>).
std::array<std::int64_t, max_rank> mask_strides(const dims_t& mask, int score_rank, int lead = 0);

}  // namespace loom::ops
