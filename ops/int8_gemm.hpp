// int8 weights for decoding: the product of float rows with a weight matrix quantized once per
// output channel (core/int8_matrix.hpp). A decoding step reads every weight matrix once per token; int8 reads a quarter of the
// bytes of float. Private to the library (the executor's exec_options::weights = int8 uses it).
#pragma once

#include <cstdint>
#include <vector>

#include "../core/int8_matrix.hpp"
#include "loom/core/kernel.hpp"

namespace loom::ops {

using loom::int8_matrix;
using loom::quantize_rows;

/// y[i, j] ≈ Σ_k x[i, k] · scale[j] · q[j, k] for i < m, j < w.rows, computed as exact integer
/// sums. Each row of x is quantized on the fly to int16, symmetric:
///   sx = max_k |x[i, k]| / 32767 (float), qx[k] = x[i, k] / sx rounded to nearest even and
///   clamped to [−32767, 32767] (a row below 32767 · 2^-149 in magnitude: sx 0, qx 0);
///   S = Σ_k q[j, k] · qx[k], exact (a 64-bit integer; q[j, k] is w.at(j, k));
///   y[i, j] = float(S) · (scale[j] · sx)   (float(S) rounded once).
/// qx's step is 2^-15 of the row's largest magnitude, well below the weights' own (2^-7 of
/// their row's), and the sum has no rounding at all: so the result's bits are the same on every
/// path, for any m, thread count or split of the work. A row of x holding a NaN or an infinity
/// is computed instead as float sums of x[i, k] · float(q[j, k]) in k order, each a fused
/// multiply-add (then times scale[j]), which
/// carry the NaN or infinity as a float product would.
/// x has rows of ldx floats (ldx ≥ cols), y rows of ldy. Parallel over blocks of 64 output
/// channels (for_chunks). AVX512_VNNI's vpdpwssd where the CPU has it (with AVX512BW and DQ),
/// else AVX2's vpmaddwd (also where the products are forced onto the AVX2 kernels:
/// LOOM_SGEMM_ISA=avx2, sgemm_force_isa), else a portable loop (correct, not fast); the same bits
/// on each.
void int8_gemm(std::int64_t m, const float* x, std::int64_t ldx, const int8_weights& w, float* y, std::int64_t ldy);

/// int8_gemm as the portable loop computes it, on one thread (the same bits; for tests).
void int8_gemm_portable(std::int64_t m, const float* x, std::int64_t ldx, const int8_weights& w, float* y,
                        std::int64_t ldy);

/// int8_gemm on its AVX2 kernel whatever the CPU's choice (the same bits; for tests and
/// benchmarks). False, having touched nothing, when the CPU has no AVX2.
bool int8_gemm_avx2(std::int64_t m, const float* x, std::int64_t ldx, const int8_weights& w, float* y,
                    std::int64_t ldy);

/// The kernel int8_gemm runs now: "avx512_vnni", "avx2" or "portable".
const char* int8_gemm_kernel();

}  // namespace loom::ops
