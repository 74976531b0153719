// loom's float GEMM (ops::gemm: its own kernel where it takes the shape, else the BLAS) and
// OpenBLAS's cblas_sgemm called in turn in one process, round after round, on the same operands:
// the ratio of two medians measured side by side, where separate processes on a shared host
// move by more than a kernel change (bench_gemm runs each case on its own). Operands are held as
// the executor's arena holds them (2 MiB and more in transparent huge pages). With
// `--concurrent T`, T threads each run their own product at once (the sgemm row of
// bench_vs_torch at T threads); every call is on one thread. With `--tile-rows R` (8 or 12) loom's
// AVX-512 kernel runs tiles of R rows instead of the ones it chose for the CPU. A round times each
// side's product enough times to do about 2^30 multiply-adds (a 1024³ product once; the training
// step's smaller products several times over), so that every timing spans milliseconds.
//
//   bench_gemm_alternate [--rounds N] [--concurrent T] [--tile-rows R] [--shape NAME|all]
//
// One line per shape: loom's and OpenBLAS's median GFLOP/s (all T products counted) over the
// rounds after the first three, and loom / OpenBLAS.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <oneapi/tbb/global_control.h>

#include "../core/huge_pages.hpp"
#include "../ops/blas.hpp"
#include "../ops/sgemm_avx512.hpp"  // sgemm_avx512_force_tile_rows
#include "gemm_shapes.hpp"

namespace {

using operand = std::vector<float, loom::huge_page_allocator<float>>;

using shape = bench::gemm_shape;

// 1024³ in its three forms, then bench_gemm's shapes (gemm_shapes.hpp) but its cube (cube_nn).
const shape cubes[] = {
    {"cube_nn", false, false, 1024, 1024, 1024},  // a · b
    {"cube_tn", true, false, 1024, 1024, 1024},   // aᵀ · b: a weight gradient's form
    {"cube_nt", false, true, 1024, 1024, 1024},   // a · bᵀ: a layer's forward
};
std::vector<shape> all_shapes() {
  std::vector<shape> v(std::begin(cubes), std::end(cubes));
  for (const shape& s : bench::gemm_shapes)
    if (std::strcmp(s.name, "cube") != 0) v.push_back(s);
  return v;
}

struct operands {
  operand a, b, c;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Products per timing: about 2^30 multiply-adds.
std::int64_t calls(const shape& s) { return std::max<std::int64_t>(1, (std::int64_t{1} << 30) / (s.m * s.n * s.k)); }

// Seconds for `threads` runs at once of calls(s) products each, each thread on its own operands,
// by loom or by OpenBLAS.
double timed(const shape& s, std::vector<operands>& ops, bool loom) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (auto& o : ops)
    workers.emplace_back([&s, &o, loom] {
      const std::int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
      for (std::int64_t i = calls(s); i > 0; --i) {
        if (loom) {
          loom::ops::gemm<float>(s.ta, s.tb, s.m, s.n, s.k, 1.f, o.a.data(), lda, o.b.data(), ldb, 0.f, o.c.data(),
                                 s.n);
        } else {
          cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                      static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.f, o.a.data(),
                      static_cast<int>(lda), o.b.data(), static_cast<int>(ldb), 0.f, o.c.data(), static_cast<int>(s.n));
        }
      }
    });
  for (auto& w : workers) w.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--rounds N (4..10000)] [--concurrent T (1..64)] [--tile-rows 8|12] [--shape NAME|all]\n",
               argv0);
  std::fprintf(stderr, "shapes:");
  for (const shape& s : all_shapes()) std::fprintf(stderr, " %s", s.name);
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 25, threads = 1, tile_rows = 0;
  std::string only = "all";
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--rounds") && has_value) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--concurrent") && has_value) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--tile-rows") && has_value) {
      const std::string r = argv[++i];
      if (r != "8" && r != "12") return usage(argv[0]);
      tile_rows = std::stoi(r);
    }
    else if (!std::strcmp(argv[i], "--shape") && has_value) only = argv[++i];
    else return usage(argv[0]);
  }
  if (rounds < 4 || rounds > 10000 || threads < 1 || threads > 64) return usage(argv[0]);
  if (tile_rows != 0) {
    try {
      loom::ops::sgemm_avx512_force_tile_rows(tile_rows);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
  }
  openblas_set_num_threads(1);
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);  // loom's calls: one thread each
  bool any = false;
  for (const shape& s : all_shapes()) {
    if (only != "all" && only != s.name) continue;
    any = true;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<operands> ops(static_cast<std::size_t>(threads));
    for (auto& o : ops) {
      o.a.resize(static_cast<std::size_t>(s.m * s.k));
      o.b.resize(static_cast<std::size_t>(s.k * s.n));
      o.c.resize(static_cast<std::size_t>(s.m * s.n));
      for (auto& x : o.a) x = u(rng);
      for (auto& x : o.b) x = u(rng);
    }
    std::vector<double> loom_s, blas_s;
    for (int r = 0; r < rounds; ++r) {
      const double l = timed(s, ops, true), b = timed(s, ops, false);
      if (r >= 3) {  // the first rounds warm the caches, the pools and the pages
        loom_s.push_back(l);
        blas_s.push_back(b);
      }
    }
    const double flop = 2.0 * static_cast<double>(s.m * s.n * s.k) * static_cast<double>(threads * calls(s));
    const double l = median(loom_s), b = median(blas_s);
    std::printf("%s concurrent %d: loom %.1f GFLOP/s, OpenBLAS %.1f GFLOP/s, loom / OpenBLAS %.2f (medians of %d)\n",
                s.name, threads, flop / l * 1e-9, flop / b * 1e-9, b / l, rounds - 3);
  }
  if (!any) return usage(argv[0]);
  return 0;
}
