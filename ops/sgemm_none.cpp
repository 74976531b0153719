// loom's float GEMM on a CPU or compiler it has no vector kernels for (not x86-64 with GCC's
// intrinsics): every product says no, so the caller asks the BLAS, and the packed operands keep
// only what they were made from. The kernels are sgemm_avx512.cpp, sgemm_avx2.cpp and
// sgemm_packing.cpp. Private to ops/.
#include "sgemm_avx512.hpp"

#include <cstdint>
#include <stdexcept>

#if !(defined(__x86_64__) && defined(__GNUC__))

namespace loom::ops {

bool sgemm_avx512_takes(bool, bool, std::int64_t, std::int64_t, std::int64_t) { return false; }
sgemm_tiling sgemm_avx512_tiling() { return {"none", 0, 0, "none", "not in the table"}; }
void sgemm_force_isa(sgemm_isa isa) {
  if (isa != sgemm_isa::cpu) throw std::invalid_argument("sgemm_force_isa: loom's GEMM has no vector kernel on this CPU");
}
int sgemm_avx512_measure_tile_rows(bool) { return 0; }
void sgemm_avx512_force_tile_rows(int rows) {
  if (rows != 0)
    throw std::invalid_argument("sgemm_avx512_force_tile_rows: loom's GEMM has no AVX-512 kernel on this CPU");
}
sgemm_packed_b::sgemm_packed_b(bool trans_b, std::int64_t n, std::int64_t k, const float* b, std::int64_t ldb)
    : trans_(trans_b), n_(n), k_(k), b_(b), ldb_(ldb) {}
sgemm_packed_b::~sgemm_packed_b() = default;
std::int64_t sgemm_panels_size(std::int64_t n, std::int64_t k) { return (n + 31) / 32 * 32 * k; }
bool sgemm_pack_panels(bool, std::int64_t, std::int64_t, const float*, std::int64_t, float*) { return false; }
bool sgemm_avx512_panels(std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t, const float*,
                         std::int64_t, std::int64_t, float, float*, std::int64_t) {
  return false;
}
bool sgemm_avx512(bool, std::int64_t, float, const float*, std::int64_t, const sgemm_packed_b&, float, float*,
                  std::int64_t, const gemm_epilogue&) {
  return false;
}
bool sgemm_avx512(const sgemm_packed_a&, bool, std::int64_t, float, const float*, std::int64_t, float, float*,
                  std::int64_t) {
  return false;
}
bool sgemm_avx512_columns(bool, std::int64_t, float, const float*, std::int64_t, const sgemm_packed_b&, std::int64_t,
                          std::int64_t, float, float*, std::int64_t, const gemm_epilogue&) {
  return false;
}
bool sgemm_avx512(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t, const float*,
                std::int64_t, float, float*, std::int64_t, const gemm_epilogue&) {
  return false;
}
sgemm_packed_a::sgemm_packed_a(bool trans_a, std::int64_t m, std::int64_t k, const float* a, std::int64_t lda)
    : trans_(trans_a), m_(m), k_(k), a_(a), lda_(lda) {}
sgemm_packed_a::~sgemm_packed_a() = default;

}  // namespace loom::ops

#endif
