// Buffers for operands packed once for several products (bgemm_packed, sgemm_packed_b), kept
// when their products are done for the next ones. A training step makes the same packed
// weights again and again; glibc maps blocks of their size anew at every allocation and returns
// them at every free, so without the pool each product would fault its pages in again.
// Private to ops/.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::ops {

/// A kept buffer of words of type W (empty when none is kept): its capacity is reused, its
/// contents are unspecified. Thread-safe.
template <class W>
std::vector<W> take_packing_buffer();

/// Hands b back for a later take_packing_buffer<W>: kept while the pool of W holds fewer than
/// 16 buffers and 64 MiB, freed otherwise. Thread-safe.
template <class W>
void give_packing_buffer(std::vector<W>&& b);

}  // namespace loom::ops
