// Error-message helper shared by kernels that validate integer inputs (private).
#pragma once

#include <cstdint>
#include <string>

#include "loom/core/tensor.hpp"

namespace loom::ops {

/// The multi-index of flat element `flat` of a tensor of dims `d`, as text: "[1, 3]".
inline std::string index_text(std::int64_t flat, const dims_t& d) {
  std::string s;
  for (int a = d.rank - 1; a >= 0; --a) {
    const std::int64_t i = d.d[a] ? flat % d.d[a] : 0;
    flat = d.d[a] ? flat / d.d[a] : 0;
    s = std::to_string(i) + (s.empty() ? "" : ", ") + s;
  }
  return "[" + s + "]";
}

}  // namespace loom::ops
