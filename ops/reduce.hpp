// Deterministic sums over rows, per column: the gradients of a vector broadcast over rows
// (layer norm's gamma and beta). Private to the kernels. Broadcasting in general (add, mul) sums
// the same way through broadcast.hpp's broadcast_layout::reduce_into.
#pragma once

#include <algorithm>
#include <cstdint>

#include "parallel.hpp"

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
template <class... Sums>
void sum_over_rows(std::int64_t rows, std::int64_t cols, Sums... sums) {
  const std::int64_t grain = std::max<std::int64_t>(grain_for(2 * rows * static_cast<std::int64_t>(sizeof...(Sums))), 16);
  for_chunks(cols, grain, [&](std::int64_t j0, std::int64_t j1) {
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
  });
}

}  // namespace loom::ops
