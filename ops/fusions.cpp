// The fusion rules loom applies, in the order they are tried on each node (see fusion.hpp).
#include <array>

#include "fusion.hpp"

namespace loom::ops {

fusion_rule attention_fusion_rule();  // attention_fusion.cpp
fusion_rule linear_fusion_rule();     // linear_fusion.cpp

std::span<const fusion_rule> fusion_rules() {
  static const std::array<fusion_rule, 2> rules{attention_fusion_rule(), linear_fusion_rule()};
  return rules;
}

}  // namespace loom::ops
