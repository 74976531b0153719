// The order in which the ranks' gradients are summed, and who does each addition.
//
// The sum over ranks [lo, hi) is sum[lo, m) + sum[m, hi), m = lo + the largest power of two
// below hi - lo (loom::tree_split): the tree gradient accumulation uses over micro-batches
// (include/loom/train/accumulate.hpp). Every element of a buffer is summed in this one order,
// so the result does not depend on MPI, on timing, or on who computes which addition.
//
// The work is spread: a buffer is cut into `size` chunks and chunk c's total ends on rank c. Each
// addition of chunk c happens on the rank holding one of its two operands: the one whose subtree
// contains the chunk's target (c at the top; lo + c mod (hi - lo) in a subtree that does not
// contain it); the other operand is sent there. Each rank sends one partial sum per chunk it does
// not own, then the owners send the totals to everyone: every rank sends and receives about
// 2·(size - 1)/size of the buffer, as in a ring all-reduce, in 2·log2(size) steps.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::distributed::detail {

/// What one rank does for one chunk: add the partial sums of `receive_from` (in that order) to
/// its own, then send its sum to `send_to` (or own the chunk's total when send_to is -1).
struct chunk_role {
  std::vector<int> receive_from;
  std::vector<std::uint8_t> peer_is_left;  // per receive: the peer's sum is the left operand
  int send_to = -1;
};

/// The role of `rank` for chunk `chunk` (its total ends on rank `chunk`) among `size` ranks.
chunk_role role_of(int rank, int size, int chunk);

/// Elements [first, first + count) of a buffer of `length` elements are chunk c of `size`.
struct chunk_bounds {
  std::int64_t first = 0, count = 0;
};
chunk_bounds bounds_of(std::int64_t length, int size, int chunk);

}  // namespace loom::distributed::detail
