// 16-bit floats as stored in checkpoints: bf16 (bfloat16) and f16 (IEEE 754 binary16), held as
// their bit patterns (std::uint16_t). Widening to float is exact; narrowing rounds to nearest,
// ties to even, and keeps NaN a NaN (quiet) and infinity an infinity.
//
//   bf16: sign 1 | exponent 8 (bias 127) | mantissa 7   the top 16 bits of a float32
//   f16:  sign 1 | exponent 5 (bias 15)  | mantissa 10  max finite 65504, subnormals down to 2^-24
#pragma once

#include <bit>
#include <cstdint>

namespace loom {

/// The float a bf16 bit pattern stands for: exact (its bits followed by 16 zero bits).
constexpr float float_from_bf16(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

/// The bf16 nearest to x (ties to even); values past the largest bf16 round to infinity. A NaN
/// stays a NaN with its sign and top payload bits, made quiet.
constexpr std::uint16_t bf16_from_float(float x) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);  // carries into the exponent when the mantissa rounds up
  return static_cast<std::uint16_t>(u >> 16);
}

/// The float an f16 bit pattern stands for: exact, subnormals, infinities and NaN payloads
/// included.
constexpr float float_from_f16(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in a float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

/// The f16 nearest to x (ties to even): 65520 and above round to infinity, magnitudes up to
/// 2^-25 to zero (keeping the sign), those between to subnormals. A NaN stays a NaN with its
/// sign and top payload bits, made quiet.
constexpr std::uint16_t f16_from_float(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (a >= 0x38800000u) {                                                    // >= 2^-14: normal
    std::uint32_t r = a - 0x38000000u;  // the exponent's bias from 127 to 15
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }
  const std::uint32_t exponent = a >> 23;
  if (exponent < 102) return sign;  // below 2^-25: zero
  // a subnormal f16 counts units of 2^-24: the float's 24-bit significand shifted right
  const std::uint32_t significand = (a & 0x7fffffu) | 0x800000u, shift = 126 - exponent;  // 14..24
  std::uint32_t units = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (units & 1u))) ++units;
  return static_cast<std::uint16_t>(sign | units);
}

}  // namespace loom
