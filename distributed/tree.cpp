// Who adds what in the all-reduce (tree.hpp).
#include "tree.hpp"

#include "loom/train/accumulate.hpp"

namespace loom::distributed::detail {

namespace {

// Places the sum over ranks [lo, hi) of one chunk: returns the rank that ends up holding it,
// recording `rank`'s receives and send on the way (children first: receives in order).
int place(int lo, int hi, int target, int chunk, int rank, chunk_role& role) {
  if (hi - lo == 1) return lo;
  const int m = lo + static_cast<int>(tree_split(hi - lo));
  const bool target_left = target < m;
  const int left = place(lo, m, target_left ? target : lo + chunk % (m - lo), chunk, rank, role);
  const int right = place(m, hi, target_left ? m + chunk % (hi - m) : target, chunk, rank, role);
  const int winner = target_left ? left : right, loser = target_left ? right : left;
  if (rank == winner) {
    role.receive_from.push_back(loser);
    role.peer_is_left.push_back(target_left ? 0 : 1);
  }
  if (rank == loser) role.send_to = winner;
  return winner;
}

}  // namespace

chunk_role role_of(int rank, int size, int chunk) {
  chunk_role role;
  place(0, size, chunk, chunk, rank, role);
  return role;
}

chunk_bounds bounds_of(std::int64_t length, int size, int chunk) {
  const std::int64_t first = length * chunk / size, end = length * (chunk + 1) / size;
  return {first, end - first};
}

}  // namespace loom::distributed::detail
