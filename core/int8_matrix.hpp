// A float weight matrix quantized to int8 per output channel (row), symmetric, with float32
// scales: what exec_options::weights = int8 makes of each weight once (graph/int8_weights.cpp)
// and what the int8 products read (ops/int8_gemm.hpp). Private to the library.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/kernel.hpp"

namespace loom {

/// W [rows, cols] ≈ diag(scale) · q, each row quantized on its own (symmetric):
///   scale[j] = max_k |W[j, k]| / 127 (float division), q[j, k] = W[j, k] / scale[j] (float
///   division) rounded to nearest, ties to even, then clamped to [−127, 127]; a row of zeros has
///   scale 0 and q 0. So |W[j, k] − scale[j] · q[j, k]| ≤ scale[j] / 2 (up to float roundings).
/// q is laid out as int8_weights says (blocks of 16 rows, column pairs interleaved; padding zero).
struct int8_matrix {
  std::int64_t rows = 0, cols = 0, padded_cols = 0;
  std::vector<std::int8_t> q;
  std::vector<float> scale;  // rows rounded up to 16
  int8_weights view() const { return {q.data(), scale.data(), rows, cols, padded_cols}; }
};

/// The quantized form of w [rows, cols] (row-major, contiguous). Throws value_error naming `who`
/// and the element when w holds a NaN or an infinity (no scale represents it).
int8_matrix quantize_rows(const float* w, std::int64_t rows, std::int64_t cols, const char* who);

}  // namespace loom
