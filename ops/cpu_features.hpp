// What the CPU's vector instructions are, asked once: every choice of a kernel by CPU in ops/
// reads it here, so that two kernels never disagree about the CPU they run on. Private to ops/.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace loom::ops {

/// Who made the CPU (leaf 0 of cpuid): AMD, Intel, or anyone else.
enum class cpu_vendor { other, amd, intel };

/// The instruction sets loom's kernels choose between (all false off x86-64).
struct cpu_features {
  bool avx2_fma = false;     ///< AVX2 and FMA: the AVX2 GEMM, the x86-64-v3 clones
  bool avx512f = false;      ///< AVX-512F: the AVX-512 GEMM and GEMV, bf16 rounding
  bool avx512_v4 = false;    ///< x86-64-v4's AVX-512 (F, BW, CD, DQ, VL): the 64-byte vector clones
  bool avx512_bf16 = false;  ///< AVX-512F, BW and BF16: the bf16 GEMM
  bool avx512_vnni = false;  ///< AVX-512F, BW, DQ and VNNI: the int8 GEMM
  cpu_vendor vendor = cpu_vendor::other;  ///< "AuthenticAMD", "GenuineIntel" or another
  int family = 0;            ///< the CPU family as lscpu prints it (base, plus extended where base is 15)
  int model = 0;             ///< the model as lscpu prints it (extended model · 16 + base in families 6 and 15+)
};

/// This CPU's (read at the first call; safe among static constructors).
inline const cpu_features& cpu() {
  static const cpu_features f = [] {
    cpu_features c;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();  // needed when this runs among the static constructors
    c.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    c.avx512f = __builtin_cpu_supports("avx512f") != 0;
    const bool bw = __builtin_cpu_supports("avx512bw") != 0, dq = __builtin_cpu_supports("avx512dq") != 0;
    // x86-64-v4's features named one by one (Clang 14 has no "x86-64-v4")
    c.avx512_v4 = c.avx512f && bw && dq && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512vl");
    c.avx512_bf16 = c.avx512f && bw && __builtin_cpu_supports("avx512bf16");
    c.avx512_vnni = c.avx512f && bw && dq && __builtin_cpu_supports("avx512vnni");
    unsigned a = 0, b = 0, d = 0, e = 0;  // the vendor in ebx, edx, ecx of leaf 0
    if (__get_cpuid(0, &a, &b, &e, &d)) {
      // "Auth" "enti" "cAMD", "Genu" "ineI" "ntel"
      if (b == 0x68747541u && d == 0x69746e65u && e == 0x444d4163u) c.vendor = cpu_vendor::amd;
      if (b == 0x756e6547u && d == 0x49656e69u && e == 0x6c65746eu) c.vendor = cpu_vendor::intel;
    }
    if (__get_cpuid(1, &a, &b, &e, &d)) {  // family and model in eax of leaf 1
      const int base = static_cast<int>((a >> 8) & 0xF), ext = static_cast<int>((a >> 20) & 0xFF);
      const int model = static_cast<int>((a >> 4) & 0xF), ext_model = static_cast<int>((a >> 16) & 0xF);
      c.family = base == 0xF ? base + ext : base;
      c.model = base == 0x6 || base == 0xF ? ext_model * 16 + model : model;
    }
#endif
    return c;
  }();
  return f;
}

}  // namespace loom::ops
