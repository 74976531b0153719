// Deterministic parallel loops: chunk boundaries depend only on the problem size and the
// grain, never on the number of threads, so results are bit-identical for any thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>

namespace loom {

namespace detail {
/// Runs body(ctx, begin, end) over [0, n) in TBB chunks of at most `grain` (ops/parallel.cpp):
/// out of line, so that this header does not bring TBB's headers into every user's file.
void run_chunks(std::int64_t n, std::int64_t grain, void (*body)(void* ctx, std::int64_t, std::int64_t), void* ctx);
}  // namespace detail

/// Calls fn(begin, end) over [0, n) in chunks of at most `grain` items, in parallel. The range
/// is halved until a piece is at most `grain` long, so chunks are between grain/2 and grain
/// items and their bounds are *not* multiples of grain (192 items at grain 32: chunks of 24). A
/// caller that needs aligned bounds (whole vectors of columns, say) chunks over units of that
/// size instead (reduce.hpp's sum_over_rows). Bounds depend on n and grain only.
template <class Fn>
void for_chunks(std::int64_t n, std::int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n <= grain) {
    fn(std::int64_t{0}, n);
    return;
  }
  using F = std::remove_reference_t<Fn>;
  detail::run_chunks(
      n, grain, [](void* f, std::int64_t b, std::int64_t e) { (*static_cast<F*>(f))(b, e); },
      const_cast<void*>(static_cast<const void*>(std::addressof(fn))));
}

/// A grain that gives chunks of about `work_per_chunk` scalar operations.
inline std::int64_t grain_for(std::int64_t work_per_item, std::int64_t work_per_chunk = 32768) {
  if (work_per_item < 1) work_per_item = 1;
  std::int64_t g = work_per_chunk / work_per_item;
  return g < 1 ? 1 : g;
}

}  // namespace loom

namespace loom::ops {
using loom::for_chunks;
using loom::grain_for;
}  // namespace loom::ops
