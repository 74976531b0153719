// dropout's mask (see include/loom/ops/dropout.hpp): element i of a dropout node is kept when
// u(key, i) ≥ P, u the top 53 bits of splitmix64's output number i for the state `key`, as a
// number in [0, 1); key = mix(mix(seed[0] · 2³² + seed[1]) ^ the node's structural hash).
// Private; shared by the dropout kernels and the fused attention (which applies the mask of the
// dropout node it absorbed, so fused and unfused drop the same weights).
#pragma once

#include <cmath>
#include <cstdint>

namespace loom::ops {
// (a named namespace, not an anonymous one: kernels' lambdas capture dropout_mask, and the
// kernels are declared in public headers)
namespace dropout_detail {

constexpr std::uint64_t golden_gamma = 0x9e3779b97f4a7c15ull;

// splitmix64's output function (Steele, Lea, Flood 2014; the constants of Stafford's Mix13)
constexpr std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct dropout_mask {
  std::uint64_t key = 0;
  std::uint64_t threshold = 0;  // keep element i when its 53-bit draw is ≥ this (P · 2⁵³)

  dropout_mask(const std::int32_t* seed, std::uint64_t node_hash, double p) {
    const std::uint64_t words =
        (std::uint64_t{static_cast<std::uint32_t>(seed[0])} << 32) | static_cast<std::uint32_t>(seed[1]);
    key = mix(mix(words) ^ node_hash);
    threshold = static_cast<std::uint64_t>(std::ceil(p * 0x1.0p53));
  }
  bool keep(std::int64_t i) const {
    const std::uint64_t draw = mix(key + (static_cast<std::uint64_t>(i) + 1) * golden_gamma) >> 11;
    return draw >= threshold;
  }
};

}  // namespace dropout_detail
using dropout_detail::dropout_mask;
}  // namespace loom::ops
