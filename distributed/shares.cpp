// Optimizer-state sharding: balanced shares and the all-gather of the updated values (shares.hpp).
#include "shares.hpp"

#include <limits>
#include <type_traits>

namespace loom::distributed::detail {

std::vector<std::size_t> balanced_shares(std::span<const std::int64_t> sizes, int ranks) {
  std::int64_t total = 0;
  for (std::int64_t n : sizes) total += n;
  std::vector<std::size_t> bounds{0};
  std::int64_t so_far = 0;
  std::size_t k = 0;
  const auto n = static_cast<__int128>(ranks);
  for (int r = 1; r < ranks; ++r) {
    // distances to the target r/N · total, scaled by N (integers; no overflow in 128 bits)
    const auto target = static_cast<__int128>(total) * r;
    auto distance = [&](std::int64_t elements) {
      const __int128 d = static_cast<__int128>(elements) * n - target;
      return d < 0 ? -d : d;
    };
    while (k < sizes.size() && distance(so_far + sizes[k]) < distance(so_far)) so_far += sizes[k++];
    bounds.push_back(k);
  }
  bounds.push_back(sizes.size());
  return bounds;
}

template <class T>
void gather_shares(const communicator::state& comm, T* data, std::span<const typename flat_block<T>::segment> segments,
                   std::span<const std::size_t> bounds) {
  std::vector<int> counts(static_cast<std::size_t>(comm.size)), displacements(static_cast<std::size_t>(comm.size));
  for (std::size_t r = 0; r + 1 < bounds.size(); ++r) {
    const std::size_t first = bounds[r], end = bounds[r + 1];
    if (first == end) continue;
    const std::int64_t begin = segments[first].offset, stop = segments[end - 1].offset + segments[end - 1].size;
    if (stop > std::numeric_limits<int>::max())
      throw value_error("data_parallel: a store of more than 2^31 - 1 elements cannot be gathered in one call "
                        "(MPI counts and offsets are ints)");
    counts[r] = static_cast<int>(stop - begin);
    displacements[r] = static_cast<int>(begin);
  }
  const MPI_Datatype type = std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
  MPI_Request request;
  const char* what = "the all-gather of the updated parameters";
  check(comm,
        MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displacements.data(), type, comm.comm,
                        &request),
        what);
  wait_all(comm, std::span(&request, 1), what);
}

template void gather_shares<float>(const communicator::state&, float*, std::span<const flat_block<float>::segment>,
                                   std::span<const std::size_t>);
template void gather_shares<double>(const communicator::state&, double*, std::span<const flat_block<double>::segment>,
                                    std::span<const std::size_t>);

}  // namespace loom::distributed::detail
