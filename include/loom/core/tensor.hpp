// tensor<T>: a contiguous, row-major n-d array with value semantics; tensor_view<T>: a non-owning view.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "loom/core/dims.hpp"
#include "loom/core/errors.hpp"

namespace loom {

/// Run-time dims of a tensor: rank and sizes (rank 0 is a scalar of one element).
struct dims_t {
  int rank = 0;
  std::array<std::int64_t, max_rank> d{};

  dims_t() = default;
  dims_t(std::span<const std::int64_t> s) : rank(static_cast<int>(s.size())) {  // NOLINT
    if (s.size() > static_cast<std::size_t>(max_rank)) throw shape_error("tensor: more than " + std::to_string(max_rank) + " axes");
    std::copy(s.begin(), s.end(), d.begin());
  }
  dims_t(std::initializer_list<std::int64_t> s) : dims_t(std::span<const std::int64_t>(s.begin(), s.size())) {}

  /// Number of elements. Throws shape_error if a dim is negative or the product overflows
  /// int64 (T = 2^32 in [T, T], say), never wrapping.
  std::int64_t size() const { return prod(0, rank); }
  /// Size of axis i; negative i counts from the end.
  std::int64_t operator[](int i) const { return d[i < 0 ? rank + i : i]; }
  /// Product of the sizes of axes [from, to); throws shape_error as size() does.
  std::int64_t prod(int from, int to) const {
    std::int64_t n = 1;
    bool bad = false;
    for (int i = from; i < to; ++i) bad = bad || d[i] < 0 || __builtin_mul_overflow(n, d[i], &n);
    if (bad) throw shape_error("tensor: shape " + str() + " has a negative dim or more than 2^63 elements");
    return n;
  }
  std::span<const std::int64_t> span() const { return {d.data(), static_cast<std::size_t>(rank)}; }
  /// The multi-index of element `flat` in row-major order.
  std::vector<std::int64_t> index_of(std::int64_t flat) const {
    std::vector<std::int64_t> idx(static_cast<std::size_t>(rank));
    for (int a = rank - 1; a >= 0; --a) {
      idx[static_cast<std::size_t>(a)] = d[a] ? flat % d[a] : 0;
      flat = d[a] ? flat / d[a] : 0;
    }
    return idx;
  }
  friend bool operator==(const dims_t& a, const dims_t& b) {
    return a.rank == b.rank && std::equal(a.d.begin(), a.d.begin() + a.rank, b.d.begin());
  }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  }
};

/// Allocates T on 64-byte boundaries (a cache line; what AVX-512 loads and BLAS like best):
/// the storage of every tensor and of the executor's arena.
template <class T>
struct aligned_allocator {
  using value_type = T;
  static constexpr std::size_t alignment = 64;
  aligned_allocator() = default;
  template <class U>
  aligned_allocator(const aligned_allocator<U>&) noexcept {}  // NOLINT: rebinding
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignment)));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(alignment)); }
  template <class U>
  friend bool operator==(const aligned_allocator&, const aligned_allocator<U>&) {
    return true;
  }
};

/// A non-owning view of contiguous row-major data.
template <class T>
struct tensor_view {
  T* data = nullptr;
  dims_t dims;

  std::int64_t size() const { return dims.size(); }
  int rank() const { return dims.rank; }
  std::span<T> values() const { return {data, static_cast<std::size_t>(size())}; }
  T& operator[](std::int64_t i) const { return data[i]; }
  /// Bounds-checked element access by multi-index.
  T& at(std::initializer_list<std::int64_t> idx) const {
    if (static_cast<int>(idx.size()) != dims.rank)
      throw shape_error("tensor: index of rank " + std::to_string(idx.size()) + " into a tensor of rank " +
                        std::to_string(dims.rank));
    std::int64_t off = 0;
    int a = 0;
    for (std::int64_t i : idx) {
      if (i < 0 || i >= dims.d[a])
        throw shape_error("tensor: index " + std::to_string(i) + " out of range for axis " + std::to_string(a) +
                          " of size " + std::to_string(dims.d[a]));
      off = off * dims.d[a++] + i;
    }
    return data[off];
  }
  operator tensor_view<const T>() const { return {data, dims}; }  // NOLINT
};

/// A contiguous, row-major n-d array of T (float, double, int32, uint8) with value semantics:
/// copies are deep. Its elements are its own, or (in_block) a slot of a block shared with
/// other tensors: param_store lays its parameters out that way so that an optimizer updates
/// them in one pass. A tensor in a block keeps its slot and its shape: assigning a tensor of
/// the same shape writes the elements into the slot, and assigning another shape throws
/// shape_error (a parameter changes shape through param_store::set, which the executors see).
template <class T>
class tensor {
 public:
  tensor() = default;
  /// A zero-filled tensor of the given shape.
  explicit tensor(dims_t shape) : dims_(shape), own_(static_cast<std::size_t>(shape.size())), data_(own_.data()) {}
  /// A tensor with the given values (row-major); throws shape_error if the count differs.
  tensor(dims_t shape, const std::vector<T>& values) : dims_(shape), own_(values.begin(), values.end()) {
    if (static_cast<std::int64_t>(own_.size()) != dims_.size())
      throw shape_error("tensor: " + std::to_string(own_.size()) + " values given for shape " + dims_.str() +
                        " which holds " + std::to_string(dims_.size()));
    data_ = own_.data();
  }
  /// A copy of a view's data.
  explicit tensor(tensor_view<const T> v) : dims_(v.dims), own_(v.data, v.data + v.size()), data_(own_.data()) {}
  /// Moves the elements into the size() elements from `first` on, inside a block that `first`
  /// keeps alive (an aliasing shared_ptr of the block's owner): from now on the tensor is in
  /// that block (in_block()). flat_block does this when it packs tensors.
  void move_into(std::shared_ptr<T> first) noexcept {
    std::copy(data_, data_ + stored(), first.get());
    decltype(own_)().swap(own_);
    block_ = std::move(first);
    data_ = block_.get();
  }

  /// A tensor of `shape` whose elements are the shape.size() elements from `first` on, as they
  /// are, inside a block that `first` keeps alive (an aliasing shared_ptr of the block's owner).
  static tensor placed(dims_t shape, std::shared_ptr<T> first) noexcept {
    tensor t;
    t.dims_ = shape;
    t.block_ = std::move(first);
    t.data_ = t.block_.get();
    return t;
  }

  /// A copy has elements of its own, even when `o` lives in a block.
  tensor(const tensor& o) : dims_(o.dims_), own_(o.data_, o.data_ + o.stored()), data_(own_.data()) {}
  /// Takes `o`'s elements (or its slot in a block); `o` is left empty.
  tensor(tensor&& o) noexcept
      : dims_(o.dims_), own_(std::move(o.own_)), block_(std::move(o.block_)), data_(o.data_) {
    o.clear();
  }
  /// Copies o's elements; into the slot when in a block (another shape: shape_error, *this unchanged).
  tensor& operator=(const tensor& o) {
    if (this == &o) return *this;
    if (block_) {  // keep the slot
      check_keeps_shape(o);
      std::copy(o.data_, o.data_ + o.stored(), data_);
      return *this;
    }
    own_.assign(o.data_, o.data_ + o.stored());  // may throw: *this is unchanged then
    dims_ = o.dims_;
    data_ = own_.data();
    return *this;
  }
  /// Takes o's elements (or its slot); a tensor in a block copies them into its slot instead
  /// (another shape: shape_error, both unchanged). o is left empty unless that throws.
  tensor& operator=(tensor&& o) {
    if (this == &o) return *this;
    if (block_) {  // keep the slot
      check_keeps_shape(o);
      if (o.data_ != data_) std::copy(o.data_, o.data_ + o.stored(), data_);
      o.clear();
      return *this;
    }
    reseat(std::move(o));
    return *this;
  }
  ~tensor() = default;

  const dims_t& dims() const { return dims_; }
  std::span<const std::int64_t> shape() const { return dims_.span(); }
  int rank() const { return dims_.rank; }
  std::int64_t size() const { return dims_.size(); }
  std::int64_t dim(int i) const { return dims_[i]; }
  /// Whether the elements are a slot of a shared block (see move_into) rather than its own.
  bool in_block() const { return block_ != nullptr; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  std::span<T> values() { return {data_, stored()}; }
  std::span<const T> values() const { return {data_, stored()}; }
  T& operator[](std::int64_t i) { return data_[i]; }
  const T& operator[](std::int64_t i) const { return data_[i]; }
  T& at(std::initializer_list<std::int64_t> idx) { return view().at(idx); }
  const T& at(std::initializer_list<std::int64_t> idx) const { return view().at(idx); }
  tensor_view<T> view() { return {data_, dims_}; }
  tensor_view<const T> view() const { return {data_, dims_}; }
  void fill(T v) { std::fill(data_, data_ + stored(), v); }

 private:
  template <class>
  friend class flat_block;
  template <class>
  friend class param_store;
  // The number of elements held: size(), or 0 for a default-constructed or moved-from tensor.
  std::size_t stored() const { return data_ ? static_cast<std::size_t>(dims_.size()) : 0; }
  void check_keeps_shape(const tensor& o) const {
    if (!(o.dims_ == dims_))
      throw shape_error("tensor: a tensor in a block (a parameter, its gradient or an optimizer buffer) keeps its "
                        "shape " + dims_.str() + "; a tensor of shape " + o.dims_.str() +
                        " was assigned to it (param_store::set changes a parameter's shape)");
  }
  // Becomes o, slot or not, whatever the shapes (flat_block and param_store lay tensors out).
  void reseat(tensor&& o) noexcept {
    dims_ = o.dims_;
    own_ = std::move(o.own_);
    block_ = std::move(o.block_);
    data_ = o.data_;
    o.clear();
  }
  void clear() noexcept {
    dims_ = dims_t{};
    own_.clear();
    block_.reset();
    data_ = nullptr;
  }
  dims_t dims_;
  std::vector<T, aligned_allocator<T>> own_;  // the elements, unless in a block
  std::shared_ptr<T> block_;                  // the slot, when in a block (keeps the block alive)
  T* data_ = nullptr;                         // own_.data() or block_.get()
};

/// Converts every element (e.g. a float tensor to double for gradcheck).
template <class To, class From>
tensor<To> tensor_cast(const tensor<From>& t) {
  tensor<To> r(t.dims());
  for (std::int64_t i = 0; i < t.size(); ++i) r[i] = static_cast<To>(t[i]);
  return r;
}

}  // namespace loom
