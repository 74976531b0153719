// The TBB loop behind for_chunks (core/parallel.hpp): the range is halved until a piece is at
// most `grain` long (simple_partitioner), so the chunks depend on n and grain only.
#include "loom/core/parallel.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

namespace loom::detail {

void run_chunks(std::int64_t n, std::int64_t grain, void (*body)(void*, std::int64_t, std::int64_t), void* ctx) {
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, n, grain),
      [&](const tbb::blocked_range<std::int64_t>& r) { body(ctx, r.begin(), r.end()); }, tbb::simple_partitioner());
}

}  // namespace loom::detail
