// quantize_rows (core/int8_matrix.hpp).
#include "int8_matrix.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "loom/core/errors.hpp"

namespace loom {

using i64 = std::int64_t;

int8_matrix quantize_rows(const float* w, std::int64_t rows, std::int64_t cols, const char* who) {
  int8_matrix r;
  r.rows = rows;
  r.cols = cols;
  r.padded_cols = (cols + 63) / 64 * 64;
  const i64 padded_rows = (rows + 15) / 16 * 16, pairs = r.padded_cols / 2;
  r.q.assign(static_cast<std::size_t>(padded_rows * r.padded_cols), 0);
  r.scale.assign(static_cast<std::size_t>(padded_rows), 0.f);
  for (i64 j = 0; j < rows; ++j) {
    const float* row = w + j * cols;
    float largest = 0;
    for (i64 k = 0; k < cols; ++k) {
      if (!std::isfinite(row[k]))
        throw value_error(std::string(who) + ": element [" + std::to_string(j) + ", " + std::to_string(k) + "] is " +
                          std::to_string(row[k]) + "; int8 weights need finite values");
      largest = std::max(largest, std::fabs(row[k]));
    }
    const float scale = largest / 127.f;
    if (scale == 0) continue;  // a row of zeros (or below 127 · 2^-149 in magnitude): q 0, scale 0
    r.scale[static_cast<std::size_t>(j)] = scale;
    std::int8_t* block = r.q.data() + (j / 16) * pairs * 32 + (j % 16) * 2;  // int8_weights::at's layout
    for (i64 k = 0; k < cols; ++k) {
      const float t = std::clamp(std::nearbyint(row[k] / scale), -127.f, 127.f);  // to nearest, ties to even
      block[(k / 2) * 32 + k % 2] = static_cast<std::int8_t>(t);
    }
  }
  return r;
}

}  // namespace loom
