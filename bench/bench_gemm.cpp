// loom's own single-precision GEMM (ops/sgemm_avx512.cpp) against OpenBLAS's cblas_sgemm, and
// loom's bf16 GEMM (ops/bgemm.cpp: the same float operands rounded to bf16, float accumulation)
// beside them, on the products loom's models make (gemm_shapes.hpp). One thread, operands reused across iterations
// (hot caches), so it compares the kernels and their packing, not memory traffic. Counters:
// GFLOP/s.
//
//   bench_gemm [--benchmark_filter=REGEX]    (names: <kind>/<TT>/m=..,n=..,k=../loom|loom_r8|loom_r12|
//                                             loom_avx2|loom_bf16|openblas)
#include <cblas.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../ops/bgemm.hpp"
#include "../ops/sgemm_avx512.hpp"
#include "bench_support.hpp"
#include "gemm_shapes.hpp"

namespace {

using shape = bench::gemm_shape;

// Whose product a case measures: loom's float GEMM with the instructions and tile this CPU chose,
// or forced to AVX-512 tiles of 8 or 12 rows (loom_r8, loom_r12) or to the AVX2 kernel
// (loom_avx2: what CPUs without AVX-512 run) — all the same bits (ops/sgemm_avx512.hpp); loom's
// bf16 GEMM; OpenBLAS (set OPENBLAS_CORETYPE=Haswell to compare its AVX2 kernels with loom_avx2).
enum class kernel { loom, loom_r8, loom_r12, loom_avx2, loom_bf16, openblas };

void run(benchmark::State& state, shape s, kernel who) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const std::int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  std::vector<float> a(static_cast<std::size_t>(s.m * s.k)), b(static_cast<std::size_t>(s.k * s.n)),
      c(static_cast<std::size_t>(s.m * s.n));
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  const bool forced = who == kernel::loom_r8 || who == kernel::loom_r12 || who == kernel::loom_avx2;
  if ((who == kernel::loom || forced) && !loom::ops::sgemm_avx512_takes(s.ta, s.tb, s.m, s.n, s.k)) {
    state.SkipWithError("loom's GEMM does not take this shape on this CPU (no AVX-512?)");
    return;
  }
  if (who == kernel::loom_bf16 && !loom::ops::bgemm_takes(s.ta, s.tb, s.m, s.n, s.k)) {
    state.SkipWithError("no AVX512_BF16 on this CPU: loom's bf16 GEMM would be its portable loop");
    return;
  }
  if (who == kernel::loom_avx2 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    state.SkipWithError("no AVX2 and FMA on this CPU");
    return;
  }
  if ((who == kernel::loom_r8 || who == kernel::loom_r12) && !__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("no AVX-512 on this CPU: its tiles cannot be forced");
    return;
  }
  if (who == kernel::loom_avx2) loom::ops::sgemm_force_isa(loom::ops::sgemm_isa::avx2);
  loom::ops::sgemm_avx512_force_tile_rows(who == kernel::loom_r8 ? 8 : who == kernel::loom_r12 ? 12 : 0);
  for (auto _ : state) {
    if (who == kernel::loom || forced)
      loom::ops::sgemm_avx512(s.ta, s.tb, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n);
    else if (who == kernel::loom_bf16)
      loom::ops::bgemm(s.ta, s.tb, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n);
    else
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                  static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.f, a.data(),
                  static_cast<int>(lda), b.data(), static_cast<int>(ldb), 0.f, c.data(), static_cast<int>(s.n));
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  loom::ops::sgemm_avx512_force_tile_rows(0);
  loom::ops::sgemm_force_isa(loom::ops::sgemm_isa::cpu);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(s.m * s.n * s.k) * 1e-9,
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  openblas_set_num_threads(1);
  for (const shape& s : bench::gemm_shapes)
    for (kernel who :
         {kernel::loom, kernel::loom_r8, kernel::loom_r12, kernel::loom_avx2, kernel::loom_bf16, kernel::openblas}) {
      const char* suffix = who == kernel::loom       ? "/loom"
                           : who == kernel::loom_r8  ? "/loom_r8"
                           : who == kernel::loom_r12 ? "/loom_r12"
                           : who == kernel::loom_avx2 ? "/loom_avx2"
                           : who == kernel::loom_bf16 ? "/loom_bf16"
                                                     : "/openblas";
      const std::string name = std::string(s.name) + "/" + (s.ta ? "T" : "N") + (s.tb ? "T" : "N") +
                               "/m=" + std::to_string(s.m) + ",n=" + std::to_string(s.n) +
                               ",k=" + std::to_string(s.k) + suffix;
      bench::measured(benchmark::RegisterBenchmark(name.c_str(), run, s, who), benchmark::kMicrosecond);
    }
  const auto tiling = loom::ops::sgemm_avx512_tiling();
  benchmark::AddCustomContext("loom sgemm", std::string(tiling.isa) + ", tiles of " + std::to_string(tiling.rows) +
                                                " rows x 32 columns (" + std::to_string(tiling.packed_rows) +
                                                " rows on copied panels; " + tiling.how + ", CPU " + tiling.cpu + ")");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
