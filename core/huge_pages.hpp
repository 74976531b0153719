// An allocator that asks for transparent huge pages for large blocks (private to the library;
// tests include it): the executor's arena and the packed GEMM operands.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <new>

#include "loom/core/tensor.hpp"

namespace loom {

/// Below 2 MiB, aligned_allocator (64 bytes, like every tensor); from 2 MiB on, aligned to
/// 2 MiB, rounded up to whole 2 MiB and marked for transparent huge pages (madvise: the mode
/// Debian ships), so that the kernels' walks over large blocks take fewer TLB misses. A hint:
/// where the kernel has no huge page to give, nothing changes. Costs at most 2 MiB of resident
/// memory more per block (a huge page is resident whole).
template <class T>
struct huge_page_allocator {
  using value_type = T;
  static constexpr std::size_t huge = std::size_t{1} << 21;
  huge_page_allocator() = default;
  template <class U>
  huge_page_allocator(const huge_page_allocator<U>&) noexcept {}  // NOLINT: rebinding
  /// Bytes a block of n elements takes: n · sizeof(T), or whole huge pages from 2 MiB on (what a
  /// pool of such blocks should count against its bound). n must not exceed what allocate takes.
  static constexpr std::size_t bytes_held(std::size_t n) {
    return n < huge / sizeof(T) ? n * sizeof(T) : (n * sizeof(T) + huge - 1) / huge * huge;
  }
  T* allocate(std::size_t n) {
    if (n < huge / sizeof(T)) return aligned_allocator<T>().allocate(n);
    if (n > (static_cast<std::size_t>(-1) - huge) / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t rounded = bytes_held(n);
    void* p = ::operator new(rounded, std::align_val_t(huge));
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n < huge / sizeof(T)) aligned_allocator<T>().deallocate(p, n);
    else ::operator delete(p, std::align_val_t(huge));
  }
  template <class U>
  friend bool operator==(const huge_page_allocator&, const huge_page_allocator<U>&) {
    return true;
  }
};

}  // namespace loom
