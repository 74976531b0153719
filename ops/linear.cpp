// Fused linear kernels. See ops/fused_linear.hpp for the math; the products are matmul's
// (gemm_chunks.hpp), with the same row chunks, so a fused linear gives the unfused bits.
#include <cmath>
#include <optional>
#include <type_traits>

#include "bgemm.hpp"
#include "fused_linear.hpp"
#include "gemm_chunks.hpp"
#include "int8_gemm.hpp"
#include "loom/core/parallel.hpp"
#include "pass_gradient.hpp"
#include "reduce.hpp"
#include "sgemm_avx512.hpp"
#include "vector_isa.hpp"

namespace loom::ops {
namespace fused_linear {

constexpr double inv_sqrt2 = 0.70710678118654752440, inv_sqrt_2pi = 0.39894228040143267794;

template <class T>
T gelu(T z) {
  return z * T(0.5) * (T(1) + std::erf(z * T(inv_sqrt2)));
}
template <class T>
T gelu_slope(T z) {  // Φ(z) + z φ(z)
  const T cdf = T(0.5) * (T(1) + std::erf(z * T(inv_sqrt2)));
  const T pdf = T(inv_sqrt_2pi) * std::exp(T(-0.5) * z * z);
  return cdf + z * pdf;
}

// Rows [r0, r1) of y (n columns, the product x·wᵀ): y = act(y + b), or (y + b) + res when a
// residual is given (act none); with gelu, z = y + b is kept in z_saved for backward. Compiled
// per vector width (a plain loop here was the baseline ISA's, 4 floats per instruction).
template <class T>
LOOM_VECTOR_CLONES void epilogue(linear_params::act_t act, T* __restrict y, T* __restrict z_saved,
                                 const T* __restrict b, const T* __restrict res, std::int64_t r0, std::int64_t r1,
                                 std::int64_t n) {
  for (std::int64_t r = r0; r < r1; ++r) {
    T* yr = y + r * n;
    switch (act) {
      case linear_params::none:
        if (res) {
          const T* rr = res + r * n;
          for (std::int64_t j = 0; j < n; ++j) yr[j] = (yr[j] + b[j]) + rr[j];
        } else {
          for (std::int64_t j = 0; j < n; ++j) yr[j] = yr[j] + b[j];
        }
        break;
      case linear_params::relu:
        for (std::int64_t j = 0; j < n; ++j) yr[j] = std::max(yr[j] + b[j], T(0));
        break;
      case linear_params::gelu: {
        T* zr = z_saved + r * n;
        for (std::int64_t j = 0; j < n; ++j) {
          zr[j] = yr[j] + b[j];
          yr[j] = gelu(zr[j]);
        }
        break;
      }
    }
  }
}

// Elements [i0, i1) of dz = dy ⊙ act'(z), into out: relu from its output y, gelu from z (which
// out holds on entry).
template <class T>
LOOM_VECTOR_CLONES void activation_slope(linear_params::act_t act, const T* __restrict dy, const T* y, T* out,
                                         std::int64_t i0, std::int64_t i1) {
  if (act == linear_params::relu)
    for (std::int64_t i = i0; i < i1; ++i) {
      const T g = dy[i];  // loaded unconditionally, so that the select vectorises
      out[i] = y[i] > T(0) ? g : T(0);
    }
  else
    for (std::int64_t i = i0; i < i1; ++i) out[i] = dy[i] * gelu_slope(out[i]);
}

// y [rows, n] = x [rows, k] · wᵀ with the epilogue (bias, relu, residual) applied by loom's GEMM
// to each tile while it is in registers, instead of a pass over y after the product: when the
// product is loom's kernel's (float, AVX-512 or AVX2, more than one row — one row is a GEMV) and the
// activation is none or relu (gelu's z must be saved; erf stays in the loop above). The same
// operations in the same order: the same bits. False, having done nothing, otherwise. With
// `width`, only columns [j0, j0 + width) of y (its rows stay n long).
// With `wp`, w as the kernel packed it (exec_options::pack_weights; the same bits).
template <class T>
bool in_tiles(linear_params::act_t act, std::int64_t rows, std::int64_t n, std::int64_t k, const T* x, const T* w,
              const T* b, const T* res, T* y, std::int64_t j0 = 0, std::int64_t width = -1,
              const sgemm_packed_b* wp = nullptr) {
  if constexpr (std::is_same_v<T, float>) {
    if (act == linear_params::gelu || rows < 2) return false;
    const std::int64_t cols = width < 0 ? n : width;
    const gemm_epilogue epi{b ? b + j0 : nullptr, act == linear_params::relu, res ? res + j0 : nullptr, n};
    // false, having touched nothing, for a shape loom's kernel does not take
    if (wp) return sgemm_avx512_columns(false, rows, 1.f, x, k, *wp, j0, cols, 0.f, y + j0, n, epi);
    return sgemm_avx512(false, true, rows, cols, k, 1.f, x, k, w + j0 * k, k, 0.f, y + j0, n, epi);
  } else {
    return false;
  }
}

// A product of one row chunk (a few rows: decoding a small batch of sequences) in column
// blocks over the threads, as in_tiles does it whole: each element is computed alike in any
// column block (sgemm_avx512.hpp), so the bits are the same. Blocks of about 2^18 multiply-adds
// (multiples of 32 columns): 8 decoded sequences' layers (d 256, ffn 1024) split in two to
// eight. False, having done nothing, when in_tiles would not take every block.
template <class T>
bool in_column_tiles(linear_params::act_t act, std::int64_t rows, std::int64_t n, std::int64_t k, const T* x,
                     const T* w, const T* b, const T* res, T* y, const sgemm_packed_b* wp) {
  const std::int64_t cols = gemm_chunks::column_block<T>(false, true, rows, n, k, 1, 1 << 18);
  if (cols >= n || act == linear_params::gelu || rows < 2) return false;
  const std::int64_t blocks = (n + cols - 1) / cols;
  if (!sgemm_avx512_takes(false, true, rows, n - (blocks - 1) * cols, k)) return false;  // the last block
  // every block is taken now: the full blocks are multiples of 32 columns within a shape the
  // kernel takes, and the last one was checked
  for_chunks(blocks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t cb = c0; cb < c1; ++cb)
      in_tiles(act, rows, n, k, x, w, b, res, y, cb * cols, std::min(cols, n - cb * cols), wp);
  });
  return true;
}

// w [n, k] as the float kernel packs it for x · wᵀ, kept from one forward() to the next
// (gemm_chunks::kept_packing); null in double.
template <class T>
const sgemm_packed_b* kept_w(const op_args<T>& a, std::int64_t rows, std::int64_t n, std::int64_t k, const T* w) {
  if constexpr (std::is_same_v<T, float>) return gemm_chunks::kept_packing(a.kept, rows, true, n, k, w, k);
  else return nullptr;
}

struct sizes {
  std::int64_t rows, k, n;
};
template <class T>
sizes sizes_of(const op_args<T>& a) {
  const std::int64_t k = a.in_dims[1][1], n = a.in_dims[1][0];
  return {k ? a.in_dims[0].size() / k : 0, k, n};
}

}  // namespace fused_linear

using namespace fused_linear;
using namespace gemm_chunks;

std::int64_t linear_output_elements(const void*, const dims_t& out, std::span<const dims_t>) { return out.size(); }

template <class T>
void linear_kernels::forward(const op_args<T>& a) {
  const auto* f = static_cast<const linear_params*>(a.fused);
  const auto act = f->act;
  const auto [rows, k, n] = sizes_of(a);
  const T* x = a.input(0);
  const T* w = a.input(1);
  const T* b = a.input(2);
  const T* res = f->residual ? a.input(3) : nullptr;
  T* y = a.out;
  T* z_saved = a.saved;  // gelu: z, for backward
  const std::int64_t grain = row_grain(n, k), chunks = (rows + grain - 1) / grain;
  if constexpr (std::is_same_v<T, float>) {
    if (a.int8) {  // weights quantized to int8 (exec_options::weights): the product, then the epilogue
      int8_gemm(rows, x, k, *a.int8, y, n);
      for_chunks(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
        epilogue(act, y, z_saved, b, res, c0 * grain, std::min(rows, c1 * grain), n);
      });
      return;
    }
    if (a.bf16) {  // products in bf16 (exec_options::precision), w rounded and packed once for every row item
      const bgemm_packed_b wp(true, n, k, w, k);
      for_packed_rows(1, rows, n, k, [&](std::int64_t, std::int64_t r0, std::int64_t r1) {
        if (act == linear_params::gelu) {  // z is saved for backward: the epilogue's pass
          bgemm(false, r1 - r0, 1.f, x + r0 * k, k, wp, 0.f, y + r0 * n, n);
          epilogue(act, y, z_saved, b, res, r0, r1, n);  // while the rows are in cache
        } else {  // bias, relu and residual in the kernel's tiles
          bgemm(false, r1 - r0, 1.f, x + r0 * k, k, wp, 0.f, y + r0 * n, n,
                gemm_epilogue{b, act == linear_params::relu, res ? res + r0 * n : nullptr, n});
        }
      });
      return;
    }
  }
  const sgemm_packed_b* kept = kept_w(a, rows, n, k, w);  // w packed at an earlier call (pack_weights)
  if constexpr (std::is_same_v<T, float>) {
    if (chunks > 1) {  // w packed once for every row item (when loom's kernel packs it)
      std::optional<sgemm_packed_b> made;
      const sgemm_packed_b& wp = kept ? *kept : made.emplace(true, n, k, w, k);
      if (wp.packed()) {
        for_packed_rows(1, rows, n, k, [&](std::int64_t, std::int64_t r0, std::int64_t r1) {
          // bias, relu and residual in the kernel's tiles
          if (act != linear_params::gelu && r1 - r0 >= 2 &&
              sgemm_avx512(false, r1 - r0, 1.f, x + r0 * k, k, wp, 0.f, y + r0 * n, n,
                           gemm_epilogue{b, act == linear_params::relu, res ? res + r0 * n : nullptr, n}))
            return;
          // gelu (z is saved for backward), or one row (a GEMV)
          gemm(false, r1 - r0, 1.f, x + r0 * k, k, wp, 0.f, y + r0 * n, n);
          epilogue(act, y, z_saved, b, res, r0, r1, n);  // while the rows are in cache
        }, packed_float_rows);
        return;
      }
    }
  }
  if (chunks == 1 && in_column_tiles(act, rows, n, k, x, w, b, res, y, kept)) return;
  for_chunks(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t ch = c0; ch < c1; ++ch) {
      const std::int64_t r0 = ch * grain, r1 = std::min(rows, r0 + grain);
      if (in_tiles(act, r1 - r0, n, k, x + r0 * k, w, b, res ? res + r0 * n : nullptr, y + r0 * n, 0, -1, kept))
        continue;
      gemm<T>(false, true, r1 - r0, n, k, T(1), x + r0 * k, k, w, k, T(0), y + r0 * n, n);
      epilogue(act, y, z_saved, b, res, r0, r1, n);  // while the rows are in cache
    }
  });
}

template <class T>
void linear_kernels::backward(const op_args<T>& a) {
  const auto* f = static_cast<const linear_params*>(a.fused);
  const auto act = f->act;
  const auto [rows, k, n] = sizes_of(a);
  const T* x = a.input(0);
  const T* w = a.input(1);
  const T* dy = a.dout;
  const T* dz = dy;
  if (act != linear_params::none) {  // dz = dy ⊙ act'(z), in the workspace (relu) or over z (gelu)
    T* out = act == linear_params::relu ? a.scratch : a.saved;
    const T* y = a.out;
    for_chunks(rows * n, 1 << 15, [&](std::int64_t i0, std::int64_t i1) { activation_slope(act, dy, y, out, i0, i1); });
    dz = out;
  }
  if (T* db = a.grad(2))  // db = Σ_rows dz
    sum_over_rows(dz, n, rows, n, db, a.fresh(2));
  if (T* dx = a.grad(0))  // dx [rows, k] = dz [rows, n] · w [n, k]
    batched_gemm<T>(false, false, 1, rows, k, n, dz, n, 0, w, k, 0, dx, 0, a.fresh(0) ? T(0) : T(1), a.bf16);
  if (T* dw = a.grad(1))  // dw [n, k] = dzᵀ · x, summed over the rows
    summed_gemm<T>(true, false, 1, n, k, rows, dz, n, 0, x, k, 0, dw, a.fresh(1) ? T(0) : T(1), a.bf16);
  // the residual's dr (+)= dy last: r may be x or w, whose gradient buffer is then this one,
  // stored above (the executor marks only the first position of a node fresh); or dr may be
  // dy's own buffer (the planner's backward in place), which pass_gradient then leaves as is
  if (T* dr = f->residual ? a.grad(3) : nullptr) pass_gradient(dy, dr, rows * n, a.fresh(3));
}

template void linear_kernels::forward(const op_args<float>&);
template void linear_kernels::forward(const op_args<double>&);
template void linear_kernels::backward(const op_args<float>&);
template void linear_kernels::backward(const op_args<double>&);

}  // namespace loom::ops
