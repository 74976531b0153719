// safetensors: the file format PyTorch, JAX and Hugging Face use to exchange named tensors.
//
// Layout: an 8-byte little-endian u64 N, then N bytes of JSON header, then the data section:
//   {"enc.0.weight": {"dtype": "F32", "shape": [4, 8], "data_offsets": [0, 128]}, ...,
//    "__metadata__": {"step": "100"}}
// Offsets are relative to the start of the data section; the tensors cover it exactly, without
// gaps or overlaps; values are row-major and little-endian. Writers here pad the header with
// spaces so that the data section starts at a multiple of 8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "loom/core/errors.hpp"
#include "loom/core/params.hpp"
#include "loom/core/tensor.hpp"
#include "loom/io/half.hpp"

namespace loom {

/// Element types a safetensors file may hold (the ones loom reads and writes); its "dtype".
/// f16 is IEEE binary16, bf16 bfloat16 (loom/io/half.hpp converts them).
enum class storage_type { f32, f64, i32, i64, u8, boolean, f16, bf16 };

/// The header's name for a dtype: "F32", "F64", "I32", "I64", "U8", "BOOL", "F16", "BF16".
std::string_view storage_name(storage_type t);
/// Bytes per element of a dtype.
std::size_t storage_size(storage_type t);
/// Whether a dtype holds floating-point values (F32, F64, F16, BF16).
constexpr bool is_floating(storage_type t) {
  return t == storage_type::f32 || t == storage_type::f64 || t == storage_type::f16 || t == storage_type::bf16;
}
/// The dtype of a C++ element type (float, double, int32, int64, uint8).
template <class T>
constexpr storage_type storage_type_of();

/// One tensor of a safetensors file: its dtype, its shape (any rank) and its raw little-endian
/// bytes (exactly numel · dtype_size of them).
struct stored_tensor {
  storage_type type = storage_type::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;

  std::int64_t numel() const;
  /// The shape as "[2, 3]".
  std::string shape_str() const;
};

/// The contents of a safetensors file: tensors by name (in name order) and the string metadata.
struct tensor_file {
  std::map<std::string, stored_tensor, std::less<>> tensors;
  std::map<std::string, std::string> metadata;

  bool contains(std::string_view name) const { return tensors.find(name) != tensors.end(); }
  /// The tensor of that name; throws missing_error naming it if absent.
  const stored_tensor& at(std::string_view name) const;
};

/// Packs a tensor's values (float, double, int32, int64 or uint8) as a stored tensor of the
/// matching dtype.
template <class T>
stored_tensor to_stored(const tensor<T>& t);
/// Packs a float or double tensor as a stored tensor of a floating dtype `as` (F32, F64, F16
/// or BF16), each value rounded once to the nearest of `as` (ties to even; a double is not
/// rounded to float first). Throws value_error for an integer dtype.
template <class T>
stored_tensor to_stored(const tensor<T>& t, storage_type as);

/// Converts a stored tensor to a tensor<T>. For T = float or double any dtype converts, value
/// by value (F16 and BF16 exactly); an integer T (int32, int64, uint8) needs the same dtype (uint8 also takes BOOL),
/// else value_error. Throws shape_error if it has more axes than a loom tensor holds (6).
template <class T>
tensor<T> to_tensor(const stored_tensor& s);

/// A tensor to write, by reference: nothing is copied. `bytes` holds numel · dtype_size bytes.
struct tensor_bytes_view {
  std::string_view name;
  storage_type type = storage_type::f32;
  std::span<const std::int64_t> shape;
  std::span<const std::byte> bytes;
};

/// Limits read_safetensors applies to files from untrusted sources (docs/reliability.md).
/// The header is at most 100 MB, as PyTorch's safetensors reader allows.
inline constexpr std::uint64_t max_header_bytes = 100'000'000;
/// At most this many bytes in one string of the header (a tensor name, a metadata key or
/// value): a name of megabytes is hostile, and its parse would hold several times its size.
inline constexpr std::size_t max_header_string_bytes = std::size_t{1} << 20;
/// At most this many tensors in one file.
inline constexpr std::size_t max_stored_tensors = 1'000'000;
/// At most this many dims in one shape (numpy's limit is 32 or 64).
inline constexpr std::size_t max_stored_rank = 64;
/// At most this many metadata entries (each costs ~100 bytes of memory for as few as 7 bytes of
/// header: the limit keeps a header of tiny entries from growing 14-fold in memory).
inline constexpr std::size_t max_metadata_entries = 100'000;

/// Reads and validates a whole safetensors file. Throws io_error naming the file and the fault:
/// unreadable or short file, header length past the end or above max_header_bytes, header not
/// a JSON object of the format's shape (a flat object of flat objects; nothing nests deeper),
/// unknown field or dtype, a name given twice, more than max_stored_tensors tensors,
/// max_stored_rank dims or max_metadata_entries metadata entries, a string longer than
/// max_header_string_bytes, a shape whose size differs from its offsets, offsets out of range,
/// overlapping or leaving gaps. The header is parsed in one pass without being held whole;
/// memory stays within a small multiple of the file's size, and tensor bytes are allocated only
/// after every check passed. Never reads out of bounds, whatever the bytes.
tensor_file read_safetensors(const std::string& path);

/// The index of the first NaN or infinite value of a floating tensor; -1 if there is none
/// (always for other dtypes). Throws shape_error if the byte count does not fit the shape.
std::int64_t first_non_finite(const stored_tensor& s);
/// `"w" holds NaN at element 3`: a difference line for a tensor that is not finite.
std::string non_finite_text(std::string_view name, const stored_tensor& s, std::int64_t index);

/// Writes tensors (in name order) and metadata atomically: to `path + ".tmp"` in the same
/// directory, fsync, then rename over `path`. On a write failure the temporary file is removed,
/// `path` is left as it was, and io_error is thrown. Throws value_error (before touching the
/// disk) for duplicate or non-UTF-8 names, the reserved name "__metadata__", or a byte count
/// that does not match the shape.
void write_safetensors(const std::string& path, std::span<const tensor_bytes_view> tensors,
                       const std::map<std::string, std::string>& metadata = {});
/// Writes a tensor_file, as above.
void write_safetensors(const std::string& path, const tensor_file& file);

/// Saves every parameter's value (not the gradients) in T's dtype (F32 or F64) with the given
/// metadata, atomically as write_safetensors does. Throws io_error.
template <class T>
void save_safetensors(const std::string& path, const param_store<T>& params,
                      const std::map<std::string, std::string>& metadata = {});

/// How load_safetensors matches a file to a store.
struct load_options {
  /// Tensors in the file that the store does not have are an error (else they are ignored).
  bool strict = true;
  /// Float tensors holding NaN or infinity load (else each is a difference).
  bool allow_non_finite = false;
};

/// Every difference between a file and a store, listed in one message; thrown by the loaders.
struct load_mismatch_error : io_error {
  load_mismatch_error(const std::string& what, std::vector<std::string> differences)
      : io_error(what), differences(std::move(differences)) {}
  /// One line per difference: "missing tensor \"b\"", "\"w\": shape [2, 3] in the file, [3, 2] in the store", ...
  std::vector<std::string> differences;
};

/// The differences between a file and a store, one line each (empty if it would load): every
/// parameter must be in the file with the same shape and a floating dtype (F32, F64, F16,
/// BF16), and finite unless
/// options.allow_non_finite; with options.strict, tensors not in the store are differences too. `skip_prefix` marks file tensors to ignore.
template <class T>
std::vector<std::string> param_differences(const tensor_file& file, const param_store<T>& params,
                                           load_options options = {}, std::string_view skip_prefix = {});

/// Copies the file's tensors into the store's parameters (converting their values to T). Checks
/// everything first: on any difference throws load_mismatch_error listing all of them, and the
/// store is unchanged. Gradients are untouched.
template <class T>
void assign_params(const tensor_file& file, param_store<T>& params, load_options options = {},
                   std::string_view skip_prefix = {}, std::string_view source = "tensor file");

/// Loads a safetensors file into a store whose parameters are already set (names and shapes).
/// Throws io_error for an unreadable or malformed file and load_mismatch_error listing every
/// difference (missing tensor, wrong shape, non-float dtype, NaN or infinity unless allowed,
/// extra tensor when strict); on any error the store is unchanged.
template <class T>
void load_safetensors(const std::string& path, param_store<T>& params, load_options options = {});

template <class T>
constexpr storage_type storage_type_of() {
  if constexpr (std::is_same_v<T, float>)
    return storage_type::f32;
  else if constexpr (std::is_same_v<T, double>)
    return storage_type::f64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return storage_type::i32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return storage_type::i64;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return storage_type::u8;
  else
    static_assert(sizeof(T) == 0, "storage_type_of: loom stores float, double, int32, int64 and uint8");
}

}  // namespace loom
