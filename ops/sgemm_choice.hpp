// What loom's float GEMM (sgemm_avx512.cpp) runs on this CPU: the vector instructions, the
// tile's rows, and how far a panel of op(B) may spread over B and still be read in place. One
// table holds the CPUs these were measured on; any other CPU times the tiles at its first product.
// The choices change the speed, never the bits (sgemm_avx512.hpp). Private to ops/.
#pragma once

#include <cstdint>

#include "cpu_features.hpp"  // cpu_vendor

namespace loom::ops::sgemm_choice {

/// The vector instructions the products run on: AVX-512 where the CPU has it, else AVX2 + FMA
/// (ops/sgemm_avx2.cpp: the same panels, the same bits), else none (the BLAS computes them).
enum class isa_t { none, avx2, avx512 };

/// sgemm_force_isa's choice if one is in force, else LOOM_SGEMM_ISA's (read once; "avx2" or
/// "avx512", std::invalid_argument for any other value or an instruction set the CPU lacks),
/// else the CPU's best.
isa_t chosen_isa();

/// The rows of a tile on `isa` for products that read op(B) in place (packed_panels false) or
/// from copied panels: the AVX2 kernel's 3; on AVX-512 sgemm_avx512_force_tile_rows's if in
/// force, else the table's for this CPU, else the rows timed faster at the first product.
std::int64_t tile_rows(isa_t isa, bool packed_panels);

/// sgemm_avx512_force_tile_rows's rows, 0 when none are forced.
int forced_tile_rows();

/// The floats a panel's K rows may spread over B (k · ldb) and still be read in place (packs_b).
std::int64_t in_place_span();

/// One CPU kind in the table: its vendor, family and model as lscpu prints them (model −1: every
/// model of the family), the tile rows for op(B) in place and in copied panels (0: timed at the
/// first product), and in_place_span's floats.
struct cpu_entry {
  const char* name;
  cpu_vendor vendor;
  int family, model;
  int rows, packed_rows;
  std::int64_t span;
};

/// The table's entry for this vendor, family and model; for a CPU not in it, an entry named "not
/// in the table" whose rows are 0 (timed) and whose span is the default.
const cpu_entry& table_entry(cpu_vendor vendor, int family, int model);

/// Times 8- and 12-row AVX-512 tiles now and returns the rows of the faster (12 only when at
/// least 3% faster): a [96, 256] · [256, 256] product, op(B) in place or in copied panels, a few
/// alternating rounds (about a millisecond). Defined beside the kernel it times (sgemm_avx512.cpp).
std::int64_t measure_rows(bool packed_panels);

}  // namespace loom::ops::sgemm_choice
