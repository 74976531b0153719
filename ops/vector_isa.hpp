// Row loops for the vector width of the CPU that runs them: a function marked
// LOOM_VECTOR_CLONES is compiled three times — AVX-512 (x86-64-v4), AVX2 + FMA (x86-64-v3) and
// the x86-64 baseline — and the best version the CPU supports is chosen once, when the program
// loads (GCC's target_clones: an ifunc). Kernels are compiled with -ffp-contract=off, so no
// version fuses a multiply and an add that the source keeps apart: all three give the same
// bits, and results do not depend on which machine runs them. Put it on the function that a
// parallel chunk calls (a lambda inside a marked function is not cloned with it). Private.
#pragma once

//
// Not under ThreadSanitizer: the ifunc resolver runs while the program is being relocated,
// before TSan's run time is set up, and its instrumented code crashes there; TSan builds use
// the baseline version (the same source, the same bits).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define LOOM_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LOOM_VECTOR_CLONES
#endif
