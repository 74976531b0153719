// Optimizer-state sharding (data_parallel::shard_optimizer): which parameters each rank
// updates, and the all-gather that gives every rank every updated value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "loom/core/flat_block.hpp"
#include "mpi.hpp"

namespace loom::distributed::detail {

/// Consecutive shares of parameters of `sizes` elements (in name order) for `ranks` ranks,
/// balanced by elements: share r is [bounds[r], bounds[r + 1]), and each boundary is the
/// parameter boundary nearest to r/N of all elements (the earlier one on a tie). Depends only
/// on the sizes, so every rank computes the same.
std::vector<std::size_t> balanced_shares(std::span<const std::int64_t> sizes, int ranks);

/// Gathers each rank's share of a packed block (segments [bounds[r], bounds[r + 1]) of
/// `segments`, updated by rank r) into every rank's `data`, in place: one MPI_Iallgatherv,
/// waited for within the communicator's timeout. Throws value_error for a share of more than
/// 2^31 − 1 elements (MPI counts are ints), rank_lost_error as every wait.
template <class T>
void gather_shares(const communicator::state& comm, T* data, std::span<const typename flat_block<T>::segment> segments,
                   std::span<const std::size_t> bounds);

}  // namespace loom::distributed::detail
