// safetensors: dtypes, conversions, atomic writing and loading into a store. Reading is in
// safetensors_read.cpp.
#include "loom/io/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "../core/atomic_file.hpp"
#include "../core/text.hpp"

namespace loom {

static_assert(std::endian::native == std::endian::little,
              "loom's safetensors code copies values as they are in memory: it needs a little-endian host");

using json = nlohmann::json;

namespace {

constexpr std::string_view metadata_key = "__metadata__";


struct dtype_info {
  storage_type type;
  std::string_view name;
  std::size_t size;
};
constexpr dtype_info dtypes[] = {
    {storage_type::f32, "F32", 4}, {storage_type::f64, "F64", 8}, {storage_type::i32, "I32", 4},
    {storage_type::i64, "I64", 8}, {storage_type::u8, "U8", 1},   {storage_type::boolean, "BOOL", 1},
    {storage_type::f16, "F16", 2}, {storage_type::bf16, "BF16", 2},
};

// The value of a 16-bit float as a float (exact).
float widen(storage_type t, std::uint16_t bits) {
  return t == storage_type::bf16 ? float_from_bf16(bits) : float_from_f16(bits);
}

// A double rounded to float with the last bit set when inexact ("round to odd"): rounding that
// float once more to 16 bits gives the same result as rounding the double directly (24 bits
// keep more than 2 bits beyond the 8 or 11 of bf16 and f16), with no double rounding.
float to_float_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isfinite(f) && static_cast<double>(f) != d) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) --u;  // the neighbour toward zero
    f = std::bit_cast<float>(u | 1u);
  }
  return f;
}

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string_view storage_name(storage_type t) {
  for (const auto& d : dtypes)
    if (d.type == t) return d.name;
  return "?";
}
std::size_t storage_size(storage_type t) {
  for (const auto& d : dtypes)
    if (d.type == t) return d.size;
  return 0;
}

std::int64_t stored_tensor::numel() const {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end() &&
      std::none_of(shape.begin(), shape.end(), [](std::int64_t d) { return d < 0; }))
    return 0;
  std::int64_t n = 1;
  for (std::int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw shape_error("stored tensor: shape " + shape_str() + " has a negative dim or too many elements");
  return n;
}
std::string stored_tensor::shape_str() const {
  return shape_text(shape);
}

const stored_tensor& tensor_file::at(std::string_view name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw missing_error("tensor file: no tensor named " + in_quotes(name));
  return it->second;
}

namespace {
template <class F>
std::int64_t first_non_finite_of(const stored_tensor& s) {
  const std::int64_t n = s.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    F v;
    std::memcpy(&v, s.bytes.data() + i * static_cast<std::int64_t>(sizeof(F)), sizeof(F));
    if (!std::isfinite(v)) return i;
  }
  return -1;
}
// 16-bit floats: all exponent bits set means infinity or NaN (the same mask works for both).
std::int64_t first_non_finite_16(const stored_tensor& s) {
  const std::uint16_t mask = s.type == storage_type::bf16 ? 0x7f80 : 0x7c00;
  const std::int64_t n = s.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint16_t v;
    std::memcpy(&v, s.bytes.data() + i * 2, 2);
    if ((v & mask) == mask) return i;
  }
  return -1;
}
template <class F>
double value_at(const stored_tensor& s, std::int64_t i) {
  F v;
  std::memcpy(&v, s.bytes.data() + i * static_cast<std::int64_t>(sizeof(F)), sizeof(F));
  if constexpr (std::is_same_v<F, std::uint16_t>)
    return static_cast<double>(widen(s.type, v));
  else
    return static_cast<double>(v);
}
}  // namespace

std::int64_t first_non_finite(const stored_tensor& s) {
  if (!is_floating(s.type)) return -1;
  if (s.bytes.size() != static_cast<std::size_t>(s.numel()) * storage_size(s.type))
    throw shape_error("first_non_finite: " + std::to_string(s.bytes.size()) + " bytes for shape " + s.shape_str());
  if (s.type == storage_type::f16 || s.type == storage_type::bf16) return first_non_finite_16(s);
  return s.type == storage_type::f32 ? first_non_finite_of<float>(s) : first_non_finite_of<double>(s);
}

std::string non_finite_text(std::string_view name, const stored_tensor& s, std::int64_t index) {
  const double v = s.type == storage_type::f32   ? value_at<float>(s, index)
                   : s.type == storage_type::f64 ? value_at<double>(s, index)
                                                 : value_at<std::uint16_t>(s, index);
  const std::string what = std::isnan(v) ? "NaN" : v > 0 ? "+infinity" : "-infinity";
  return in_quotes(name) + " holds " + what + " at element " + std::to_string(index) + " of " + s.shape_str();
}

template <class T>
stored_tensor to_stored(const tensor<T>& t) {
  stored_tensor s;
  s.type = storage_type_of<T>();
  s.shape.assign(t.shape().begin(), t.shape().end());
  const auto* p = reinterpret_cast<const std::byte*>(t.data());
  s.bytes.assign(p, p + t.size() * static_cast<std::int64_t>(sizeof(T)));
  return s;
}

template <class T>
stored_tensor to_stored(const tensor<T>& t, storage_type as) {
  static_assert(std::is_floating_point_v<T>, "to_stored(t, as): t holds float or double");
  if (!is_floating(as))
    throw value_error("to_stored: " + std::string(storage_name(as)) +
                      " is not a floating dtype (a float tensor packs as F32, F64, F16 or BF16)");
  if (as == storage_type::f32 && !std::is_same_v<T, float>) return to_stored(tensor_cast<float>(t));
  if (as == storage_type::f64 && !std::is_same_v<T, double>) return to_stored(tensor_cast<double>(t));
  if (as == storage_type_of<T>()) return to_stored(t);
  stored_tensor s;  // F16 or BF16
  s.type = as;
  s.shape.assign(t.shape().begin(), t.shape().end());
  s.bytes.resize(static_cast<std::size_t>(t.size()) * 2);
  for (std::int64_t i = 0; i < t.size(); ++i) {
    const float f = std::is_same_v<T, float> ? static_cast<float>(t.data()[i]) : to_float_odd(t.data()[i]);
    const std::uint16_t bits = as == storage_type::bf16 ? bf16_from_float(f) : f16_from_float(f);
    std::memcpy(s.bytes.data() + i * 2, &bits, 2);
  }
  return s;
}

namespace {
template <class Src, class T>
void convert(const stored_tensor& s, T* out) {
  const std::int64_t n = s.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    Src v;
    std::memcpy(&v, s.bytes.data() + i * static_cast<std::int64_t>(sizeof(Src)), sizeof(Src));
    out[i] = static_cast<T>(v);
  }
}
template <class T>
void convert_16(const stored_tensor& s, T* out) {
  const std::int64_t n = s.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint16_t v;
    std::memcpy(&v, s.bytes.data() + i * 2, 2);
    out[i] = static_cast<T>(widen(s.type, v));
  }
}
}  // namespace

template <class T>
tensor<T> to_tensor(const stored_tensor& s) {
  if (s.shape.size() > static_cast<std::size_t>(max_rank))
    throw shape_error("to_tensor: shape " + s.shape_str() + " has more than " + std::to_string(max_rank) + " axes");
  if (s.bytes.size() != static_cast<std::size_t>(s.numel()) * storage_size(s.type))
    throw shape_error("to_tensor: " + std::to_string(s.bytes.size()) + " bytes for shape " + s.shape_str() + " of " +
                      std::string(storage_name(s.type)));
  tensor<T> t{dims_t(std::span<const std::int64_t>(s.shape))};
  if constexpr (std::is_floating_point_v<T>) {
    switch (s.type) {
      case storage_type::f32:
        convert<float>(s, t.data());
        break;
      case storage_type::f64:
        convert<double>(s, t.data());
        break;
      case storage_type::i32:
        convert<std::int32_t>(s, t.data());
        break;
      case storage_type::i64:
        convert<std::int64_t>(s, t.data());
        break;
      case storage_type::u8:
      case storage_type::boolean:
        convert<std::uint8_t>(s, t.data());
        break;
      case storage_type::f16:
      case storage_type::bf16:
        convert_16(s, t.data());
        break;
    }
  } else {
    const bool same =
        s.type == storage_type_of<T>() || (storage_type_of<T>() == storage_type::u8 && s.type == storage_type::boolean);
    if (!same)
      throw value_error("to_tensor: a " + std::string(storage_name(s.type)) + " tensor does not convert to " +
                        std::string(storage_name(storage_type_of<T>())) + " (integer targets need the same dtype)");
    convert<T>(s, t.data());
  }
  return t;
}

void write_safetensors(const std::string& path, std::span<const tensor_bytes_view> tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = "write_safetensors: " + in_quotes(path) + ": ";
  // Check and lay out everything before touching the disk.
  std::vector<const tensor_bytes_view*> ordered;
  for (const auto& t : tensors) ordered.push_back(&t);
  std::sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->name < b->name; });
  json header = json::object();
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < ordered.size(); ++i) {
    const tensor_bytes_view& t = *ordered[i];
    const std::string name(t.name);
    if (i > 0 && ordered[i - 1]->name == t.name) throw value_error(where + "two tensors are named " + in_quotes(name));
    if (t.name == metadata_key) throw value_error(where + "a tensor may not be named \"__metadata__\"");
    std::uint64_t needed = storage_size(t.type);
    bool overflow = false;
    for (std::int64_t d : t.shape) {
      if (d < 0)
        throw value_error(where + "tensor " + in_quotes(name) + " has a negative dim in " + shape_text(t.shape));
      overflow = overflow || __builtin_mul_overflow(needed, static_cast<std::uint64_t>(d), &needed);
    }
    if (std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end()) needed = 0, overflow = false;
    if (overflow || needed != t.bytes.size())
      throw value_error(where + "tensor " + in_quotes(name) + " has " + std::to_string(t.bytes.size()) +
                        " bytes, but shape " + shape_text(t.shape) + " of " + std::string(storage_name(t.type)) +
                        " needs " + (overflow ? std::string("more") : std::to_string(needed)));
    header[name] = {{"dtype", std::string(storage_name(t.type))},
                    {"shape", std::vector<std::int64_t>(t.shape.begin(), t.shape.end())},
                    {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  if (!metadata.empty()) header[std::string(metadata_key)] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw value_error(where + "a tensor name or metadata string is not valid UTF-8 (" + e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned

  detail::atomic_file out(path, "write_safetensors");
  const std::uint64_t header_size = text.size();
  out.write(&header_size, 8);
  out.write(text.data(), text.size());
  for (const tensor_bytes_view* t : ordered) out.write(t->bytes.data(), t->bytes.size());
  out.commit();
}

void write_safetensors(const std::string& path, const tensor_file& file) {
  std::vector<tensor_bytes_view> views;
  for (const auto& [name, t] : file.tensors) views.push_back({name, t.type, t.shape, t.bytes});
  write_safetensors(path, views, file.metadata);
}

template <class T>
void save_safetensors(const std::string& path, const param_store<T>& params,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<tensor_bytes_view> views;
  for (const auto& [name, e] : params)
    views.push_back({name, storage_type_of<T>(), e.value.shape(), std::as_bytes(e.value.values())});
  write_safetensors(path, views, metadata);
}

template <class T>
std::vector<std::string> param_differences(const tensor_file& file, const param_store<T>& params, load_options options,
                                           std::string_view skip_prefix) {
  std::vector<std::string> differences;
  for (const auto& [name, e] : params) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      differences.push_back("missing tensor " + in_quotes(name) + " (shape " + e.value.dims().str() + " in the store)");
      continue;
    }
    const stored_tensor& s = it->second;
    if (!is_floating(s.type))
      differences.push_back(in_quotes(name) + ": dtype " + std::string(storage_name(s.type)) +
                            " in the file, expected F32, F64, F16 or BF16");
    if (!std::equal(s.shape.begin(), s.shape.end(), e.value.shape().begin(), e.value.shape().end()))
      differences.push_back(in_quotes(name) + ": shape " + s.shape_str() + " in the file, " + e.value.dims().str() +
                            " in the store");
    else if (const std::int64_t bad = first_non_finite(s); bad >= 0 && !options.allow_non_finite)
      differences.push_back(non_finite_text(name, s, bad) + " (load with allow_non_finite = true to accept it)");
  }
  if (options.strict)
    for (const auto& [name, s] : file.tensors)
      if (!params.contains(name) && !(!skip_prefix.empty() && name.starts_with(skip_prefix)))
        differences.push_back("unexpected tensor " + in_quotes(name) + " " + s.shape_str() +
                              " is not in the store (load with strict = false to ignore it)");
  return differences;
}

template <class T>
void assign_params(const tensor_file& file, param_store<T>& params, load_options options, std::string_view skip_prefix,
                   std::string_view source) {
  auto differences = param_differences(file, params, options, skip_prefix);
  if (!differences.empty()) {
    std::string what = std::string(source) + " does not match the parameters (" + std::to_string(differences.size()) +
                       (differences.size() == 1 ? " difference" : " differences") + "; nothing was loaded):";
    for (const auto& d : differences) what += "\n  - " + d;
    throw load_mismatch_error(what, std::move(differences));
  }
  // Convert everything first, so that a failure (out of memory) leaves the store as it was.
  std::vector<tensor<T>> values;
  for (const auto& [name, e] : params) values.push_back(to_tensor<T>(file.tensors.find(name)->second));
  std::size_t i = 0;
  for (auto& [name, e] : params) e.value = std::move(values[i++]);
}

template <class T>
void load_safetensors(const std::string& path, param_store<T>& params, load_options options) {
  const tensor_file file = read_safetensors(path);
  assign_params(file, params, options, {}, "safetensors file " + in_quotes(path));
}

template stored_tensor to_stored(const tensor<float>&);
template stored_tensor to_stored(const tensor<double>&);
template stored_tensor to_stored(const tensor<std::int32_t>&);
template stored_tensor to_stored(const tensor<std::int64_t>&);
template stored_tensor to_stored(const tensor<std::uint8_t>&);
template stored_tensor to_stored(const tensor<float>&, storage_type);
template stored_tensor to_stored(const tensor<double>&, storage_type);
template tensor<float> to_tensor(const stored_tensor&);
template tensor<double> to_tensor(const stored_tensor&);
template tensor<std::int32_t> to_tensor(const stored_tensor&);
template tensor<std::int64_t> to_tensor(const stored_tensor&);
template tensor<std::uint8_t> to_tensor(const stored_tensor&);
#define LOOM_IO_INSTANTIATE(T)                                                                                        \
  template void save_safetensors(const std::string&, const param_store<T>&,                                           \
                                 const std::map<std::string, std::string>&);                                          \
  template std::vector<std::string> param_differences(const tensor_file&, const param_store<T>&, load_options,        \
                                                      std::string_view);                                              \
  template void assign_params(const tensor_file&, param_store<T>&, load_options, std::string_view, std::string_view); \
  template void load_safetensors(const std::string&, param_store<T>&, load_options);
LOOM_IO_INSTANTIATE(float)
LOOM_IO_INSTANTIATE(double)
#undef LOOM_IO_INSTANTIATE

}  // namespace loom
