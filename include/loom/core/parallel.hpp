// Deterministic parallel loops: chunk boundaries depend only on the problem size and the
// grain, never on the number of threads, so results are bit-identical for any thread count.
#pragma once

#include <cstdint>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

namespace loom {

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
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, n, grain),
      [&](const tbb::blocked_range<std::int64_t>& r) { fn(r.begin(), r.end()); }, tbb::simple_partitioner());
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
