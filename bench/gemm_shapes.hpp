// The float products the GEMM benchmarks time (bench_gemm, bench_gemm_alternate): the layers of
// the tiny and small encoder–decoders of scripts/bench_vs_torch (row chunks of 256, weight
// gradients summed over all rows), the fused attention's blocks, 1024³, and wider layers.
#pragma once

#include <cstdint>

namespace bench {

struct gemm_shape {
  const char* name;
  bool ta, tb;  // op(A) = Aᵀ, op(B) = Bᵀ
  std::int64_t m, n, k;
};

// NT: x · Wᵀ (forward), NN: dz · W (input gradient), TN: dzᵀ · x (weight gradient)
inline constexpr gemm_shape gemm_shapes[] = {
    {"tiny_qkv", false, true, 256, 64, 64},      {"tiny_ffn_up", false, true, 256, 256, 64},
    {"tiny_ffn_down", false, true, 256, 64, 256}, {"tiny_dx", false, false, 256, 64, 256},
    {"tiny_dw", true, false, 64, 64, 512},        {"tiny_dw_ffn", true, false, 256, 64, 512},
    {"tiny_attn", false, true, 16, 16, 16},       {"small_ffn_up", false, true, 256, 1024, 256},
    {"small_dx", false, false, 256, 256, 1024},   {"small_dw", true, false, 256, 256, 1024},
    {"attn_block", false, true, 128, 256, 64},    {"attn_pv", false, false, 128, 64, 256},
    {"cube", false, false, 1024, 1024, 1024},
    // beyond N and K of 1024: a d = 512 model's QKV (N 1536) and FFN (2048), their input and weight
    // gradients (K 1536 and 2048 in 256-row chunks), a 4096-wide FFN's down projection, a 32k-token lm head
    {"wide_qkv", false, true, 256, 1536, 512},    {"wide_dx", false, false, 256, 512, 1536},
    {"wide_dw", true, false, 1536, 512, 1024},    {"ffn2048_up", false, true, 256, 2048, 512},
    {"ffn2048_down", false, true, 256, 512, 2048}, {"ffn4096_down", false, true, 256, 1024, 4096},
    {"lm_head_32k", false, true, 256, 32000, 512},
};

}  // namespace bench
