// Row loops for the vector width of the CPU that runs them: a function marked
// LOOM_VECTOR_CLONES is compiled three times — AVX-512 (x86-64-v4), AVX2 + FMA (x86-64-v3) and
// the x86-64 baseline — and the best version the CPU supports is chosen once, when the program
// loads (GCC's target_clones: an ifunc). The ops are compiled with -ffp-contract=fast: the
// AVX-512 and AVX2 versions contract a·b + c into one FMA (the baseline has none), so results
// are the same for any thread count on one machine but may differ in the last bits between
// machines of different vector ISAs (as GEMM does). The optimizers (train/optim.cpp) do not
// contract, so that every process of a data-parallel job applies the same update. Put it on the
// function that a parallel chunk calls (a lambda inside a marked function is not cloned with
// it). Private.
#pragma once

//
// Not under ThreadSanitizer: the ifunc resolver runs while the program is being relocated,
// before TSan's run time is set up, and its instrumented code crashes there; TSan builds use
// the baseline version (the same source; no FMA, so last bits may differ from the release build).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define LOOM_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LOOM_VECTOR_CLONES
#endif

#include "cpu_features.hpp"

namespace loom::ops {

/// Whether the CPU runs the AVX-512 version of the clones (x86-64-v4). Without AVX-512, GCC 12
/// keeps a 64-byte generic vector (gcc_vector<float, 64>) in memory rather than in two ymm
/// registers, and every operation on one goes through the stack; the hot loops written with
/// 64-byte vectors therefore take a version over 32-byte vectors when this is false (the same
/// bits), or another kernel.
inline const bool wide_vectors = cpu().avx512_v4;

}  // namespace loom::ops
