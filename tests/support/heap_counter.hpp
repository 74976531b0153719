// Counts the bytes this process holds through operator new, and the peak. Include it in ONE
// translation unit of a test executable: it replaces the global operator new and delete.
// Used to prove that readers of hostile files allocate within a bound.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace test {

struct heap_counter {
  static inline std::atomic<std::size_t> current{0}, peak{0};
  /// Bytes held now and the highest count since the last reset_peak().
  static std::size_t held() { return current.load(); }
  static std::size_t peak_since_reset() { return peak.load(); }
  static void reset_peak() { peak.store(current.load()); }
};

namespace detail {
// Each block carries its size in a 16-byte prefix (keeps the 16-byte alignment of malloc).
constexpr std::size_t prefix = 16;
inline void* counted_new(std::size_t n) {
  void* p = std::malloc(n + prefix);
  if (!p) throw std::bad_alloc();
  *static_cast<std::size_t*>(p) = n;
  const std::size_t now = heap_counter::current.fetch_add(n) + n;
  std::size_t seen = heap_counter::peak.load();
  while (now > seen && !heap_counter::peak.compare_exchange_weak(seen, now)) {
  }
  return static_cast<char*>(p) + prefix;
}
inline void counted_delete(void* q) noexcept {
  if (!q) return;
  void* p = static_cast<char*>(q) - prefix;
  heap_counter::current.fetch_sub(*static_cast<std::size_t*>(p));
  std::free(p);
}
}  // namespace detail

}  // namespace test

void* operator new(std::size_t n) { return test::detail::counted_new(n); }
void* operator new[](std::size_t n) { return test::detail::counted_new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return test::detail::counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return test::detail::counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { test::detail::counted_delete(p); }
void operator delete[](void* p) noexcept { test::detail::counted_delete(p); }
void operator delete(void* p, std::size_t) noexcept { test::detail::counted_delete(p); }
void operator delete[](void* p, std::size_t) noexcept { test::detail::counted_delete(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { test::detail::counted_delete(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { test::detail::counted_delete(p); }
