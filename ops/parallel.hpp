// Deterministic parallel loops: chunk boundaries depend only on the problem size and the
// grain, never on the number of threads, so results are bit-identical for any thread count.
#pragma once

#include <cstdint>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

namespace loom::ops {

/// Calls fn(begin, end) over [0, n) in chunks of at most `grain` items, in parallel.
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

}  // namespace loom::ops
