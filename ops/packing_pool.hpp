// Buffers for operands packed once for several products (bgemm_packed, sgemm_packed_b), kept
// when their products are done for the next ones. A training step makes the same packed
// weights again and again; glibc maps blocks of their size anew at every allocation and returns
// them at every free, so without the pool each product would fault its pages in again.
// Private to ops/.
#pragma once

#include <cstdint>
#include <vector>

#include "../core/huge_pages.hpp"

namespace loom::ops {

/// A packed operand's words: from 2 MiB on in transparent huge pages (huge_page_allocator), as
/// the executor's arena. A packed op(B) is read once per row block of its product, panel after
/// panel: with 4 KiB pages a 1024 × 1024 operand spans 1024 pages.
template <class W>
using packing_buffer = std::vector<W, huge_page_allocator<W>>;

/// A kept buffer of words of type W (empty when none is kept): its capacity is reused, its
/// contents are unspecified. Thread-safe.
template <class W>
packing_buffer<W> take_packing_buffer();

/// Hands b back for a later take_packing_buffer<W>: kept while the pool of W holds fewer than
/// 16 buffers and 64 MiB (a buffer in huge pages counted by its whole pages), freed otherwise.
/// Thread-safe.
template <class W>
void give_packing_buffer(packing_buffer<W>&& b);

/// A run of at least n words inside `buffer` that starts on a 64-byte boundary (a cache line),
/// growing the buffer when it is too short and never shrinking it (resizing a reused buffer down
/// and up again would zero its new words at every call; the packing overwrites them anyway).
/// glibc's malloc aligns to 16 bytes only (a block it maps starts 16 bytes past a page): the
/// rows of a packed panel (32 floats) read or written as 32-byte vectors from there would split
/// a cache line at every other access.
template <class W, class A>
W* line_aligned(std::vector<W, A>& buffer, std::int64_t n) {
  static_assert(64 % sizeof(W) == 0);
  constexpr std::size_t slack = 64 / sizeof(W) - 1;
  if (buffer.size() < static_cast<std::size_t>(n) + slack) buffer.resize(static_cast<std::size_t>(n) + slack);
  const auto at = reinterpret_cast<std::uintptr_t>(buffer.data());
  return buffer.data() + (64 - at % 64) % 64 / sizeof(W);
}

}  // namespace loom::ops
