// Error-message helper shared by kernels that validate integer inputs (private).
#pragma once

#include <cstdint>
#include <string>

#include "loom/core/tensor.hpp"

namespace loom::ops {

/// The multi-index of flat element `flat` of a tensor of dims `d`, as text: "[1, 3]".
inline std::string index_text(std::int64_t flat, const dims_t& d) {
  std::string s;
  for (std::int64_t i : d.index_of(flat)) s += (s.empty() ? "" : ", ") + std::to_string(i);
  return "[" + s + "]";
}

}  // namespace loom::ops
