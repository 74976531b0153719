// feed: one named input tensor handed to executor::forward.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include "loom/core/errors.hpp"
#include "loom/core/tensor.hpp"

namespace loom {

/// Storage type of a fed tensor.
enum class storage : std::uint8_t { f32, f64, i32, u8 };

template <class U>
constexpr storage storage_of() {
  if constexpr (std::is_same_v<U, float>) return storage::f32;
  else if constexpr (std::is_same_v<U, double>) return storage::f64;
  else if constexpr (std::is_same_v<U, std::int32_t>) return storage::i32;
  else if constexpr (std::is_same_v<U, std::uint8_t>) return storage::u8;
  else static_assert(sizeof(U) == 0, "feed: tensors of float, double, int32_t, int64_t or uint8_t only");
}

constexpr const char* storage_name(storage s) {
  switch (s) {
    case storage::f32: return "float";
    case storage::f64: return "double";
    case storage::i32: return "int32";
    case storage::u8: return "uint8 (bool)";
  }
  return "?";
}

/// A named input for executor::forward. From an lvalue tensor it *borrows* (the tensor must
/// stay alive and unchanged until backward() has returned); from an rvalue it takes
/// ownership, and the executor keeps it until the next forward(). Int64 tensors (PyTorch's
/// default for token ids and lengths) are converted to the int32 that graphs hold ids in, on
/// the way in: a value outside int32's range throws value_error naming it and its position.
class feed {
 public:
  feed(const std::string& name, const tensor<std::int64_t>& t) : feed(name, narrow(name, t.view())) {}
  feed(const std::string& name, tensor_view<const std::int64_t> v) : feed(name, narrow(name, v)) {}
  template <class U>
    requires(!std::is_same_v<U, std::int64_t>)
  feed(std::string name, const tensor<U>& t)
      : name_(std::move(name)), type_(storage_of<U>()), data_(t.data()), dims_(t.dims()) {}
  template <class U>
    requires(!std::is_same_v<U, std::int64_t>)
  feed(std::string name, tensor<U>&& t) : name_(std::move(name)), type_(storage_of<U>()), dims_(t.dims()) {
    auto owned = std::make_shared<tensor<U>>(std::move(t));
    data_ = owned->data();
    keep_ = std::move(owned);
  }
  template <class U>
    requires(!std::is_same_v<std::remove_const_t<U>, std::int64_t>)
  feed(std::string name, tensor_view<const U> v)
      : name_(std::move(name)), type_(storage_of<std::remove_const_t<U>>()), data_(v.data), dims_(v.dims) {}

  /// A borrowed view whose matrices (the last two axes, rows contiguous) lie `mat_stride`
  /// elements apart instead of back to back: the first P rows of each [capacity, D] block
  /// of a KV cache, say. Ops that can read such a view do so in place; for others the
  /// executor copies it first.
  template <class U>
  static feed strided(std::string name, const U* data, dims_t dims, std::int64_t mat_stride) {
    feed f(std::move(name), tensor_view<const U>{data, dims});
    if (dims.rank < 2) throw shape_error("feed::strided: needs at least two axes");
    if (mat_stride < dims[-2] * dims[-1])
      throw shape_error("feed::strided: matrices of " + std::to_string(dims[-2] * dims[-1]) +
                        " elements cannot lie " + std::to_string(mat_stride) + " apart");
    f.mat_stride_ = mat_stride;
    return f;
  }

  /// A borrowed, *writable* view with room to grow: each matrix (the last two axes) is the
  /// first dims[-2] rows of a block of `capacity_rows` rows, and the blocks lie back to back
  /// (mat_stride = capacity_rows · dims[-1]). A node that appends rows to this input
  /// (concat along axis −2: a KV cache's keys) writes them into the free rows in place instead
  /// of copying the whole input (op_entry::appends_to_input); rows past dims[-2] may then be
  /// overwritten by forward(). Throws shape_error when capacity_rows < dims[-2].
  template <class U>
  static feed with_room(std::string name, U* data, dims_t dims, std::int64_t capacity_rows) {
    if (dims.rank < 2) throw shape_error("feed::with_room: needs at least two axes");
    if (capacity_rows < dims[-2])
      throw shape_error("feed::with_room: " + std::to_string(dims[-2]) + " rows do not fit a capacity of " +
                        std::to_string(capacity_rows));
    feed f(std::move(name), tensor_view<const U>{data, dims});
    f.mat_stride_ = capacity_rows * dims[-1];
    f.room_rows_ = capacity_rows;
    return f;
  }

  const std::string& name() const { return name_; }
  /// Elements between consecutive matrices (last two axes); 0 when contiguous.
  std::int64_t mat_stride() const { return mat_stride_; }
  /// Rows each matrix may grow to in place (feed::with_room); 0 when it may not grow.
  std::int64_t room_rows() const { return room_rows_; }
  storage type() const { return type_; }
  const void* data() const { return data_; }
  const dims_t& dims() const { return dims_; }

 private:
  // int64 ids and lengths as int32, each value checked first
  static tensor<std::int32_t> narrow(const std::string& name, tensor_view<const std::int64_t> v) {
    tensor<std::int32_t> r(v.dims);
    for (std::int64_t i = 0; i < v.size(); ++i) {
      if (v[i] < std::numeric_limits<std::int32_t>::min() || v[i] > std::numeric_limits<std::int32_t>::max()) {
        std::string at;
        for (std::int64_t k : v.dims.index_of(i)) at += (at.empty() ? "" : ", ") + std::to_string(k);
        throw value_error("feed \"" + name + "\": the int64 value " + std::to_string(v[i]) + " at [" + at +
                          "] does not fit the int32 that graphs hold ids and lengths in");
      }
      r[i] = static_cast<std::int32_t>(v[i]);
    }
    return r;
  }
  std::string name_;
  storage type_;
  const void* data_ = nullptr;
  dims_t dims_;
  std::int64_t mat_stride_ = 0;
  std::int64_t room_rows_ = 0;
  std::shared_ptr<const void> keep_;
};

}  // namespace loom
