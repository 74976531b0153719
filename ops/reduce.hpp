// Deterministic sums over rows, per column: the gradients of a vector broadcast over rows
// (layer norm's gamma and beta). Private to the kernels. Broadcasting in general (add, mul) sums
// the same way through broadcast.hpp's broadcast_layout::reduce_into.
#pragma once

#include <algorithm>
#include <cstdint>

#include "parallel.hpp"
#include "vector_isa.hpp"

namespace loom::ops {

/// One sum over rows: dst[j] (= when fresh, += otherwise) Σ_r term(r, j). A null dst is skipped.
template <class T, class Term>
struct column_sum {
  T* dst;
  bool fresh;
  Term term;
};
template <class T, class Term>
column_sum(T*, bool, Term) -> column_sum<T, Term>;

/// Computes every sum in one pass over the rows: columns in parallel chunks (at least 16
/// columns, a cache line of floats, since each chunk reads every row), rows in order inside
/// each chunk. The order of additions depends on `rows` only, so results are bit-identical
/// for any thread count.
/// Columns [j0, j1) of every sum (see sum_over_rows).
template <class... Sums>
LOOM_VECTOR_CLONES void sum_columns(std::int64_t rows, std::int64_t j0, std::int64_t j1, Sums&... sums) {
  auto start = [&](auto& s) {
    if (s.dst && s.fresh) std::fill(s.dst + j0, s.dst + j1, decltype(+*s.dst)(0));
  };
  (start(sums), ...);
  for (std::int64_t r = 0; r < rows; ++r) {
    auto add_row = [&](auto& s) {
      if (s.dst)
        for (std::int64_t j = j0; j < j1; ++j) s.dst[j] += s.term(r, j);
    };
    (add_row(sums), ...);
  }
}

template <class... Sums>
void sum_over_rows(std::int64_t rows, std::int64_t cols, Sums... sums) {
  const std::int64_t grain = std::max<std::int64_t>(grain_for(2 * rows * static_cast<std::int64_t>(sizeof...(Sums))), 16);
  for_chunks(cols, grain, [&](std::int64_t j0, std::int64_t j1) { sum_columns(rows, j0, j1, sums...); });
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
