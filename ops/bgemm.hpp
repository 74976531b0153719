// loom's bf16 GEMM: float operands rounded to bfloat16 as they are packed, multiplied with float32
// accumulation (AVX512_BF16's vdpbf16ps where the CPU has it, a portable loop with the same bits
// elsewhere). The compute half of mixed-precision training: float master values, bf16 products.
// Private to ops/. Measured on AMD EPYC (Zen 4), 1 thread, November 2026: 1.6–2.0× as fast as
// sgemm_avx512 on layer-sized products (K ≥ 64), 175–220 GFLOP/s (figures in bgemm.cpp).
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "sgemm_avx512.hpp"  // gemm_epilogue

namespace loom::ops {

/// x rounded to bfloat16 (the upper 16 bits of a float), to nearest with ties to even, as bits.
/// Values beyond bf16's largest finite value by half an ulp or more become ±inf (as IEEE rounding
/// does); float denormals round like any other value (to a bf16 denormal, ±0 or the smallest
/// normal); −0 stays −0; a NaN stays a NaN of the same sign and upper payload bits, made quiet.
inline std::uint16_t to_bf16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7FFF'FFFFu) > 0x7F80'0000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/// The float of bf16 bits h (exact: bf16 is a float with its lower 16 bits zero).
inline float from_bf16(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

/// out[i] = to_bf16(x[i]) for i in [0, n): the same bits, 16 floats at a time on CPUs with AVX-512.
void to_bf16(const float* x, std::uint16_t* out, std::int64_t n);

/// out[i] = from_bf16(h[i]) for i in [0, n).
void from_bf16(const std::uint16_t* h, float* out, std::int64_t n);

/// Whether bgemm computes products of this shape with AVX512_BF16 on this CPU (M, N, K ≥ 1, any
/// transposes, any size). When false bgemm still computes them, with the same bits, through
/// bgemm_portable: correct but one multiply-add at a time, no faster than float.
bool bgemm_takes(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k);

/// C[M,N] = alpha · Â · B̂ + beta · C (row-major, C not read when beta is 0), where Â and B̂ are
/// op(A) and op(B) rounded to bf16 (below): A and B are float, rounded while they are packed.
/// op(X) = Xᵀ when trans_x. M, N, K ≥ 0; lda, ldb and ldc as for a BLAS.
///
/// Each element of C is computed exactly as vdpbf16ps computes a lane (the Intel SDM's
/// definition, checked bit for bit on AMD Zen 4), in this order:
///  - operands: Â and B̂ are to_bf16 of op(A) and op(B), except that floats below 2^-126 in
///    magnitude (denormals) count as zeros of their sign (vcvtne2ps2bf16, which rounds them,
///    reads them so; checked against to_bf16 for all 2^32 floats on AMD Zen 4); so every operand
///    is 0, a normal bf16, ±inf or NaN. K odd: one more k, whose Â and B̂ are +0 (the last
///    pair's upper half);
///  - s = +0, then for each pair q = 0, 1, ... of (k, k + 1) = (2q, 2q + 1), in order:
///      s = ftz(s + Â[i, 2q + 1] · B̂[2q + 1, j]), then s = ftz(s + Â[i, 2q] · B̂[2q, j])
///    — the odd k first; each step a fused multiply-add (exact product, one rounding to nearest
///    even), ftz making a nonzero result below 2^-126 in magnitude, after rounding to 24 bits with
///    an unbounded exponent, a zero of its sign (vdpbf16ps's FTZ; MXCSR is not consulted);
///  - C[i, j] = fma(beta, C[i, j], alpha · s), without the multiply when alpha is 1 and without
///    C when beta is 0 (then alpha · s): the same as loom's float GEMM, under the MXCSR.
/// So an element's bits depend only on its row of op(A), its column of op(B), alpha, beta and its
/// old value: never on M, N, how the caller splits the rows, the thread count or the CPU (NaN
/// results are NaN, their payloads unspecified). Its error against the exact alpha · Σ_k Â B̂ +
/// beta · C is at most γ(K + 2) · (|alpha| · Σ_k |Â B̂| + |beta · C|) + |alpha| · K · 2^-126 (the
/// flushes), γ(n) = n·u / (1 − n·u), u = 2^-24: K + 2 roundings in a chain. Against the float
/// product alpha · op(A) · op(B) + beta · C, add
/// (2^-7 + 2^-16) · |alpha| · Σ_k |op(A) op(B)| (bf16 keeps 8 significant bits: each is within
/// 2^-8 of its float, relatively, where neither is below 2^-126).
void bgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

/// Which operand of bgemm a packed copy is: op(A) [M, K] or op(B) [K, N].
enum class bgemm_side { a, b };

template <bgemm_side S>
class bgemm_packed;
/// op(A) packed once, for the column blocks of one product.
using bgemm_packed_a = bgemm_packed<bgemm_side::a>;
/// op(B) packed once, for the row chunks of one product (a weight read by every chunk of a
/// layer's rows).
using bgemm_packed_b = bgemm_packed<bgemm_side::b>;

/// bgemm(trans_a, b's trans_b, m, b.count(), b.k(), alpha, a, lda, b's b, ldb, beta, c, ldc): the
/// same bits, without packing op(B) again; then the epilogue e (sgemm_avx512.hpp: + bias[j],
/// max(0, y), + residual[i · ldr + j], each when given), applied to each tile while it is in
/// registers — the same operations, so the same bits, as a pass over C afterwards.
void bgemm(bool trans_a, std::int64_t m, float alpha, const float* a, std::int64_t lda, const bgemm_packed_b& b,
           float beta, float* c, std::int64_t ldc, const gemm_epilogue& e = {});

/// bgemm(a's trans_a, trans_b, a.count(), n, a.k(), alpha, a's a, lda, b, ldb, beta, c, ldc): the
/// same bits, without packing op(A) again.
void bgemm(const bgemm_packed_a& a, bool trans_b, std::int64_t n, float alpha, const float* b, std::int64_t ldb,
           float beta, float* c, std::int64_t ldc);

/// One operand of bgemm rounded to bf16 and packed once (the packing split over the threads),
/// for several products that share it. Read-only once made: products on other threads may
/// share it. Holds the operand's address (the portable path and shapes the kernel does not take
/// read the operand itself), so the operand must outlive it, unchanged. Its words (half of the
/// operand's bytes) come from a pool that keeps freed buffers for the next ones (up to 16
/// buffers and 64 MiB): a step makes the same packed weights again, whose pages the system would
/// otherwise take back and fault in again at every call.
template <bgemm_side S>
class bgemm_packed {
 public:
  /// op(A) [count, K] or op(B) [K, count] as bgemm's trans_a, a, lda or trans_b, b, ldb take it
  /// (count, K ≥ 0).
  bgemm_packed(bool trans, std::int64_t count, std::int64_t k, const float* x, std::int64_t ld);
  ~bgemm_packed();
  bgemm_packed(const bgemm_packed&) = delete;
  bgemm_packed& operator=(const bgemm_packed&) = delete;
  /// M for op(A), N for op(B).
  std::int64_t count() const { return count_; }
  std::int64_t k() const { return k_; }

 private:
  friend void bgemm(bool, std::int64_t, float, const float*, std::int64_t, const bgemm_packed_b&, float, float*,
                    std::int64_t, const gemm_epilogue&);
  friend void bgemm(const bgemm_packed_a&, bool, std::int64_t, float, const float*, std::int64_t, float, float*,
                    std::int64_t);
  bool trans_;
  std::int64_t count_, k_;
  const float* x_;
  std::int64_t ld_;
  packing_buffer<std::uint32_t> storage_;  // empty unless the kernel takes the products
  const std::uint32_t* words_ = nullptr;
};

/// bgemm as the portable loop computes it on CPUs without AVX512_BF16 (the same bits; exposed so
/// that tests compare the two paths on CPUs that have both).
void bgemm_portable(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                    const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                    std::int64_t ldc);

}  // namespace loom::ops
