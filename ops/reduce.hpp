// Deterministic sums over rows, per column: the gradients of a vector broadcast over rows
// (the fused linear's bias; layer_norm's gamma and beta through add_chunk_partials). Private to
// the kernels. Broadcasting in general (add, mul) sums the same way through broadcast.hpp's
// broadcast_layout::reduce_into.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gcc_vector.hpp"
#include "loom/core/parallel.hpp"
#include "vector_isa.hpp"

namespace loom::ops {

/// Columns [j0, j1) of sum_over_rows: 16 columns at a time in one GCC generic vector (one zmm of
/// floats with AVX-512), whose sums stay in registers over all the rows — kept in dst, they were
/// loaded and stored again for every row, each row waiting on the previous row's store (1.7
/// cycles per element), and a fixed-size array of sums came out as scalar code. Four such tiles
/// are summed side by side where the range has them: one tile alone is a chain of dependent
/// adds, one per row, that waited for each add's latency (the bias sums of the tiny model's
/// backward were ~1% of its training step [AMD EPYC]). Each column adds its rows in order,
/// starting from 0 (fresh) or dst, in the vectors and the scalar tail alike — the same bits
/// however the columns are grouped.
inline constexpr std::int64_t column_tile = 16;

// Bytes: the vector size, 64 (one zmm of floats) on CPUs with AVX-512, 32 elsewhere
// (wide_vectors, vector_isa.hpp). A column's sum is the same either way (each lane adds its own
// column's rows in order).
template <int Tiles, int Bytes, class T>
[[gnu::always_inline]] inline void sum_tiles(const T* __restrict x, std::int64_t ld, std::int64_t rows, std::int64_t t,
                                             T* __restrict dst, bool fresh) {  // in each clone
  constexpr std::int64_t width = column_tile;
  using vec = gcc_vector<T, Bytes>;
  constexpr int per = static_cast<int>(width * sizeof(T) / Bytes);  // vectors per tile
  constexpr std::int64_t step = Bytes / sizeof(T);                 // columns per vector
  vec acc[Tiles * per];
  for (int u = 0; u < Tiles * per; ++u) {
    acc[u] = vec{};
    if (!fresh) std::memcpy(&acc[u], dst + t + u * step, sizeof(vec));
  }
  for (std::int64_t r = 0; r < rows; ++r)
#pragma GCC unroll 16
    for (int u = 0; u < Tiles * per; ++u) {
      vec row;
      std::memcpy(&row, x + r * ld + t + u * step, sizeof row);
      acc[u] += row;
    }
  for (int u = 0; u < Tiles * per; ++u) std::memcpy(dst + t + u * step, &acc[u], sizeof(vec));
}

template <class T>
LOOM_VECTOR_CLONES void sum_columns(const T* __restrict x, std::int64_t ld, std::int64_t rows, std::int64_t j0,
                                    std::int64_t j1, T* __restrict dst, bool fresh) {
  constexpr std::int64_t width = column_tile;
  std::int64_t t = j0;
  if (wide_vectors) {
    for (; t + 4 * width <= j1; t += 4 * width) sum_tiles<4, 64>(x, ld, rows, t, dst, fresh);
    for (; t + width <= j1; t += width) sum_tiles<1, 64>(x, ld, rows, t, dst, fresh);
  } else {
    for (; t + 4 * width <= j1; t += 4 * width) sum_tiles<4, 32>(x, ld, rows, t, dst, fresh);
    for (; t + width <= j1; t += width) sum_tiles<1, 32>(x, ld, rows, t, dst, fresh);
  }
  for (; t < j1; ++t) {
    T acc = fresh ? T(0) : dst[t];
    for (std::int64_t r = 0; r < rows; ++r) acc += x[r * ld + t];
    dst[t] = acc;
  }
}

/// dst[j] (= when fresh, += otherwise) Σ_r x[r · ld + j] for j < cols: columns in parallel
/// chunks of whole groups of four tiles of 16 (whole cache lines, since each chunk reads every row),
/// rows in order inside each column. The order of additions depends on `rows` only, so results
/// are bit-identical for any thread count. A null dst is skipped.
template <class T>
void sum_over_rows(const T* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, T* dst, bool fresh) {
  if (!dst) return;
  // chunks of whole groups of four tiles (which sum_columns takes side by side): chunks of
  // columns would not be multiples of 16 (for_chunks halves its range: 192 columns in chunks of
  // 24 left half of each chunk to the scalar tail)
  constexpr std::int64_t group = 4 * column_tile;
  const std::int64_t grain = grain_for(2 * rows * group);
  for_chunks((cols + group - 1) / group, grain, [&](std::int64_t c0, std::int64_t c1) {
    sum_columns(x, ld, rows, c0 * group, std::min(cols, c1 * group), dst, fresh);
  });
}

/// The other shape of the same sums, for a kernel whose one pass over the rows computes more
/// than the sums (layer_norm's dx): each chunk of rows (bounds fixed by the sizes) wrote its own
/// partial sums, partials[c · stride .. + cols); dst (= when fresh, += otherwise) gets them
/// added chunk by chunk, in order. A null dst is skipped.
template <class T>
void add_chunk_partials(T* dst, bool fresh, const T* partials, std::int64_t chunks, std::int64_t stride,
                        std::int64_t cols) {
  if (!dst) return;
  if (fresh) std::fill(dst, dst + cols, T(0));
  for (std::int64_t c = 0; c < chunks; ++c)
    for (std::int64_t j = 0; j < cols; ++j) dst[j] += partials[c * stride + j];
}

}  // namespace loom::ops
