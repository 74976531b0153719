// What loom's float GEMM runs on this CPU (sgemm_choice.hpp): the table of CPUs measured, the
// instruction set chosen, the tile rows chosen or timed, and the public calls that report or
// force them (sgemm_avx512.hpp). Private to ops/.
#include "sgemm_choice.hpp"

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cpu_features.hpp"
#include "sgemm_avx2.hpp"
#include "sgemm_avx512.hpp"

namespace loom::ops {
namespace sgemm_choice {

namespace {

// ---- the table ----
//
// Tile rows. A tile keeps rows × 32 sums in registers: 8 rows (16 of AVX-512's 32 registers) or
// 12 (24). More rows load fewer panel vectors per multiply-add, which a CPU that runs two
// full-width 512-bit FMAs per cycle may need; fewer rows read fewer lines of op(A) at once.
// Products that read op(B) in place and those that read copied panels are chosen apart.
//
// In-place span. A panel read in place has its K rows ldb floats apart; spread over too much of
// B its 2·K lines share too few second-level sets, and copying the panel pays (packs_b).
//
// AMD family 25 with AVX-512 (Zen 4, 512-bit FMAs in two 256-bit halves): 8 rows, faster in
// bench_gemm loom_r8 vs loom_r12, 1 thread, 2026-11-27, AMD EPYC family 25 model 17, GFLOP/s
// (median of 3): small_dx 109.9 vs 96.2, cube 109.4 vs 97.1, tiny_dw_ffn 114.9 vs 108.9,
// small_ffn_up 107.6 vs 102.9, 8 rows ahead by 1–4% on 8 of the 9 other shapes (attn_block 94.0
// vs 99.4); spans up to 1 MiB read in place (row strides of 256–768 floats 1–4% faster than the
// copy). Family 25 without AVX-512 (Zen 3) runs the AVX2 kernel, which reads neither entry.
//
// Intel family 6 model 207 (a Xeon with two 512-bit FMA ports): 12 rows in place, 8 on copied
// panels — bench_gemm 1 thread, 2026-12-07: in place tiny_dx 156 vs 145 GFLOP/s, attn_pv 157 vs 145, small_dx
// 134 vs 126; copied tiny_qkv 154 vs 144, small_ffn_up 154 vs 151, cube 149 vs 139. Timed at the
// first product instead, the choice did not hold on a busy host: `bench_vs_torch --tiling`, five
// runs on 2026-12-07, kept 12 / 8 at the first product and timed 8 / 8 again right after, in every
// run. Spans from 512 KiB on copied: in place → copied, 1 thread, median of 5 alternating runs,
// small_dx ([256, 1024] · [1024, 256], a span of 1 MiB) 131.5 → 143.0 GFLOP/s, small_dw
// ([1024, 256]ᵀ · [1024, 256]) 121.0 → 130.4, wide_dx ([256, 1536] · [1536, 512]) 61 → 142;
// spans of 64 KiB and less within noise either way (tiny_dx 155 / 152, attn_pv 146 / 146).
//
// Any other CPU (Zen 5, family 26, has not been measured with these kernels): the rows timed at
// its first product, spans from 512 KiB on copied.
constexpr std::int64_t kib = 1024 / sizeof(float);  // floats in a KiB
constexpr cpu_entry table[] = {
    {"AMD family 25 (Zen 4)", cpu_vendor::amd, 25, -1, 8, 8, 1024 * kib},
    {"Intel family 6 model 207", cpu_vendor::intel, 6, 207, 12, 8, 512 * kib},
};
constexpr cpu_entry not_in_table{"not in the table", cpu_vendor::other, 0, 0, 0, 0, 512 * kib};

}  // namespace

const cpu_entry& table_entry(cpu_vendor vendor, int family, int model) {
  for (const cpu_entry& e : table)
    if (e.vendor == vendor && e.family == family && (e.model < 0 || e.model == model)) return e;
  return not_in_table;
}

namespace {
const cpu_entry& this_cpu() {
  static const cpu_entry& e = table_entry(cpu().vendor, cpu().family, cpu().model);
  return e;
}
}  // namespace

std::int64_t in_place_span() { return this_cpu().span; }

}  // namespace sgemm_choice

#if defined(__x86_64__) && defined(__GNUC__)

namespace sgemm_choice {
namespace {

std::atomic<int> forced_isa{0};   // 0: the CPU's; else an isa_t forced (sgemm_force_isa)
std::atomic<int> forced_rows{0};  // 0: the CPU's; else 8 or 12 (sgemm_avx512_force_tile_rows)

isa_t cpu_isa() {
  static const isa_t isa = [] {
    const isa_t best = cpu().avx512f ? isa_t::avx512 : sgemm_avx2::available() ? isa_t::avx2 : isa_t::none;
    const char* env = std::getenv("LOOM_SGEMM_ISA");
    if (!env || !*env) return best;
    const std::string want = env;
    if (want == "avx512" && cpu().avx512f) return isa_t::avx512;
    if (want == "avx2" && sgemm_avx2::available()) return isa_t::avx2;
    throw std::invalid_argument("LOOM_SGEMM_ISA is '" + want + "': it must be avx2 or avx512, and the CPU must have it");
  }();
  return isa;
}

struct tile_choice {
  std::int64_t rows, packed_rows;
  const char* how;
};

const tile_choice& cpu_choice() {
  static const tile_choice choice = [] {  // once per process, at the first product
    const cpu_entry& e = this_cpu();
    if (e.rows != 0) return tile_choice{e.rows, e.packed_rows, "table"};
    return tile_choice{measure_rows(false), measure_rows(true), "measured"};
  }();
  return choice;
}

}  // namespace

isa_t chosen_isa() {
  if (const int f = forced_isa.load(std::memory_order_relaxed)) return static_cast<isa_t>(f);
  return cpu_isa();
}

int forced_tile_rows() { return forced_rows.load(std::memory_order_relaxed); }

std::int64_t tile_rows(isa_t isa, bool packed_panels) {
  if (isa == isa_t::avx2) return sgemm_avx2::tile_rows;
  if (const int forced = forced_tile_rows()) return forced;
  return packed_panels ? cpu_choice().packed_rows : cpu_choice().rows;
}

}  // namespace sgemm_choice

using sgemm_choice::isa_t;

sgemm_tiling sgemm_avx512_tiling() {
  const char* cpu_name = sgemm_choice::this_cpu().name;
  const isa_t isa = sgemm_choice::chosen_isa();
  if (isa == isa_t::none) return {"none", 0, 0, "none", cpu_name};
  if (isa == isa_t::avx2) {
    const int rows = static_cast<int>(sgemm_avx2::tile_rows);
    return {"avx2", rows, rows, "fixed", cpu_name};
  }
  if (const int forced = sgemm_choice::forced_tile_rows()) return {"avx512", forced, forced, "forced", cpu_name};
  const auto& c = sgemm_choice::cpu_choice();
  return {"avx512", static_cast<int>(c.rows), static_cast<int>(c.packed_rows), c.how, cpu_name};
}

void sgemm_force_isa(sgemm_isa isa) {
  if (isa == sgemm_isa::avx512 && !cpu().avx512f)
    throw std::invalid_argument("sgemm_force_isa: this CPU has no AVX-512");
  if (isa == sgemm_isa::avx2 && !sgemm_avx2::available())
    throw std::invalid_argument("sgemm_force_isa: this CPU has no AVX2 and FMA");
  sgemm_choice::forced_isa.store(isa == sgemm_isa::cpu      ? 0
                                 : isa == sgemm_isa::avx2   ? static_cast<int>(isa_t::avx2)
                                                            : static_cast<int>(isa_t::avx512),
                                 std::memory_order_relaxed);
}

int sgemm_avx512_measure_tile_rows(bool packed_panels) {
  return cpu().avx512f ? static_cast<int>(sgemm_choice::measure_rows(packed_panels)) : 0;
}

void sgemm_avx512_force_tile_rows(int rows) {
  if (rows != 0 && rows != 8 && rows != 12)
    throw std::invalid_argument("sgemm_avx512_force_tile_rows: rows must be 8, 12 or 0 (the CPU's choice), not " +
                                std::to_string(rows));
  if (rows != 0 && !cpu().avx512f)
    throw std::invalid_argument("sgemm_avx512_force_tile_rows: this CPU has no AVX-512 (its AVX2 tiles have 3 rows)");
  sgemm_choice::forced_rows.store(rows, std::memory_order_relaxed);
}

#endif

}  // namespace loom::ops
