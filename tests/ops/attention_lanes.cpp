// The fused attention's row exponentials (ops/attention_lanes.hpp): exp_row_sum_halves, which
// CPUs without AVX-512 run (32-byte vectors), against exp_row_sum_wide (one 64-byte vector), the
// two compiled alike here: the same stored values and the same sum, bit for bit; and both close
// to std::exp and to the sum of what they stored.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

// the 64-byte vectors are passed between always-inlined helpers only: no ABI is crossed
#pragma GCC diagnostic ignored "-Wpsabi"
#include "../../ops/attention_lanes.hpp"

using namespace loom::ops::fused_attention;

TEST_CASE("exp_row_sum over 32-byte halves gives the bits of the 64-byte version", "[attention]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t ws : {16, 32, 48, 256}) {
    for (int seed = 0; seed < 4; ++seed) {
      std::vector<float> row(static_cast<std::size_t>(ws));
      for (std::int64_t j = 0; j < ws; ++j)  // scores from −100 to +3 around the max, some masked
        row[static_cast<std::size_t>(j)] = static_cast<float>((j * 37 + seed * 11) % 103) * 0.0997f - 7.3f;
      row[static_cast<std::size_t>(ws - 1)] = -inf;  // padding past the keys
      row[static_cast<std::size_t>(seed)] = -95.f;   // below the clamp: e^ is +0
      const float m = 3.1f + 0.25f * static_cast<float>(seed);
      std::vector<float> wide = row, halves = row;
      const float sw = exp_row_sum_wide(wide.data(), ws, m);
      const float sh = exp_row_sum_halves(halves.data(), ws, m);
      CHECK(std::bit_cast<std::uint32_t>(sw) == std::bit_cast<std::uint32_t>(sh));
      double total = 0;
      for (std::int64_t j = 0; j < ws; ++j) {
        const auto i = static_cast<std::size_t>(j);
        if (std::bit_cast<std::uint32_t>(wide[i]) != std::bit_cast<std::uint32_t>(halves[i]))
          FAIL("ws = " << ws << ", element " << j << ": " << wide[i] << " vs " << halves[i]);
        // e^ of the float difference the kernel forms, below the clamp +0
        const float x = row[i] - m;
        const double want = x < -88.f ? 0.0 : std::exp(static_cast<double>(x));
        if (std::abs(halves[i] - want) > 3e-7 * want)
          FAIL("ws = " << ws << ", element " << j << ": " << halves[i] << ", e^ gives " << want);
        total += halves[i];
      }
      CHECK(halves[static_cast<std::size_t>(ws - 1)] == 0.f);
      CHECK(std::abs(sh - total) <= 1e-6 * total);
    }
  }
}
