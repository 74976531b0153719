// FNV-1a, 64 bits: the hash behind op ids (of their names), the structural hash of every node
// and the checksums the ranks of a data-parallel job compare.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace loom::fnv {

/// The hash of no bytes (FNV-1a's offset basis).
inline constexpr std::uint64_t start = 14695981039346656037ull;
inline constexpr std::uint64_t prime = 1099511628211ull;

/// h followed by the bytes of s.
constexpr std::uint64_t add(std::uint64_t h, std::string_view s) {
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= prime;
  }
  return h;
}

/// h followed by the 8 bytes of v, least significant first.
constexpr std::uint64_t add_word(std::uint64_t h, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xffu;
    h *= prime;
  }
  return h;
}

/// h followed by n bytes from data.
inline std::uint64_t add_bytes(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * prime;
  return h;
}

}  // namespace loom::fnv
