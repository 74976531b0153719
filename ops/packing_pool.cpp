// The pools of ops/packing_pool.hpp: one per word type, each under one mutex, taken once per
// packed operand (a few times per node), not per element.
#include "packing_pool.hpp"

#include <mutex>

namespace loom::ops {
namespace {

template <class W>
class buffer_pool {
 public:
  packing_buffer<W> take() {
    std::lock_guard lock(mutex_);
    if (kept_.empty()) return {};
    packing_buffer<W> b = std::move(kept_.back());
    kept_.pop_back();
    bytes_ -= huge_page_allocator<W>::bytes_held(b.capacity());
    return b;
  }
  void give(packing_buffer<W>&& b) {
    const std::size_t bytes = huge_page_allocator<W>::bytes_held(b.capacity());  // whole huge pages from 2 MiB
    std::lock_guard lock(mutex_);
    if (bytes == 0 || kept_.size() >= max_kept || bytes_ + bytes > max_kept_bytes) return;  // b frees its words
    bytes_ += bytes;
    kept_.push_back(std::move(b));
  }

 private:
  static constexpr std::size_t max_kept = 16;
  static constexpr std::size_t max_kept_bytes = std::size_t{64} << 20;
  std::mutex mutex_;
  std::vector<packing_buffer<W>> kept_;
  std::size_t bytes_ = 0;
};

template <class W>
buffer_pool<W>& pool() {
  static buffer_pool<W> p;
  return p;
}

}  // namespace

template <class W>
packing_buffer<W> take_packing_buffer() {
  return pool<W>().take();
}

template <class W>
void give_packing_buffer(packing_buffer<W>&& b) {
  pool<W>().give(std::move(b));
}

template packing_buffer<std::uint32_t> take_packing_buffer<std::uint32_t>();
template packing_buffer<float> take_packing_buffer<float>();
template void give_packing_buffer<std::uint32_t>(packing_buffer<std::uint32_t>&&);
template void give_packing_buffer<float>(packing_buffer<float>&&);

}  // namespace loom::ops
