// What the Google Benchmark programs share: how a case is measured and reported.
#pragma once

#include <algorithm>
#include <vector>

#include <benchmark/benchmark.h>

namespace bench {

/// The fastest repetition: on a machine shared with other work, the least disturbed one.
inline double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

/// Wall time (the work runs on TBB's threads, so the calling thread's CPU time means nothing),
/// 5 repetitions reported as median, mean, ... and the fastest.
inline benchmark::internal::Benchmark* measured(benchmark::internal::Benchmark* b, benchmark::TimeUnit unit) {
  return b->Unit(unit)->UseRealTime()->Repetitions(5)->ComputeStatistics("min", fastest)->ReportAggregatesOnly(true);
}

}  // namespace bench
