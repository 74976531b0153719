// safetensors reading (validate everything, then copy) and atomic writing.
#include "loom/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

namespace loom {

static_assert(std::endian::native == std::endian::little,
              "loom's safetensors code copies values as they are in memory: it needs a little-endian host");

using json = nlohmann::json;

namespace {

constexpr std::string_view metadata_key = "__metadata__";

std::string in_quotes(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}
std::string system_error_text() {
  return std::strerror(errno);
}

struct dtype_info {
  storage_type type;
  std::string_view name;
  std::size_t size;
};
constexpr dtype_info dtypes[] = {
    {storage_type::f32, "F32", 4}, {storage_type::f64, "F64", 8}, {storage_type::i32, "I32", 4},
    {storage_type::i64, "I64", 8}, {storage_type::u8, "U8", 1},   {storage_type::boolean, "BOOL", 1},
};

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---- reading ----

std::vector<std::byte> read_whole_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw io_error("safetensors: cannot open " + in_quotes(path) + ": " + system_error_text());
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_at_exit{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw io_error("safetensors: cannot stat " + in_quotes(path) + ": " + system_error_text());
  if (!S_ISREG(st.st_mode)) throw io_error("safetensors: " + in_quotes(path) + " is not a regular file");
  std::vector<std::byte> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw io_error("safetensors: cannot read " + in_quotes(path) + ": " + system_error_text());
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

// A JSON integer that is >= 0 and fits in int64, or -1.
std::int64_t non_negative(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    return u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ? static_cast<std::int64_t>(u)
                                                                                     : -1;
  }
  if (v.is_number_integer()) return std::max<std::int64_t>(v.get<std::int64_t>(), -1);
  return -1;
}

struct header_entry {
  std::string name;
  stored_tensor tensor;
  std::uint64_t begin = 0, end = 0;
};

// Parses the JSON header, rejecting duplicate keys in any object (nlohmann keeps the last).
json parse_header(std::string_view text, const std::string& where) {
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::string duplicate;
  auto callback = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys_of_open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!keys_of_open_objects.empty()) keys_of_open_objects.pop_back();
    } else if (event == json::parse_event_t::key && parsed.is_string() && !keys_of_open_objects.empty()) {
      if (!keys_of_open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    throw io_error(where + "the header is not valid JSON (" + e.what() + ")");
  }
  if (!duplicate.empty()) throw io_error(where + "the header names " + in_quotes(duplicate) + " twice");
  if (!header.is_object()) throw io_error(where + "the header is not a JSON object");
  return header;
}

header_entry parse_entry(const std::string& name, const json& info, std::uint64_t data_size, const std::string& where) {
  const std::string at = where + "tensor " + in_quotes(name) + ": ";
  if (!info.is_object()) throw io_error(at + "its entry is not a JSON object");
  for (const auto& [field, value] : info.items())
    if (field != "dtype" && field != "shape" && field != "data_offsets")
      throw io_error(at + "unknown field " + in_quotes(field));
  header_entry e;
  e.name = name;

  const auto dt = info.find("dtype");
  if (dt == info.end() || !dt->is_string()) throw io_error(at + "\"dtype\" is missing or not a string");
  const auto& dt_name = dt->get_ref<const std::string&>();
  const auto known =
      std::find_if(std::begin(dtypes), std::end(dtypes), [&](const dtype_info& d) { return d.name == dt_name; });
  if (known == std::end(dtypes))
    throw io_error(at + "unsupported dtype " + in_quotes(dt_name) + " (loom reads F32, F64, I32, I64, U8, BOOL)");
  e.tensor.type = known->type;

  const auto shape = info.find("shape");
  if (shape == info.end() || !shape->is_array()) throw io_error(at + "\"shape\" is missing or not an array");
  // numel · dtype size; a shape whose size overflows 64 bits cannot match any offsets.
  std::uint64_t bytes = known->size;
  bool overflow = false;
  for (const json& d : *shape) {
    const std::int64_t n = non_negative(d);
    if (n < 0) throw io_error(at + "\"shape\" holds " + d.dump() + ", not a non-negative integer");
    e.tensor.shape.push_back(n);
    overflow = overflow || __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(n), &bytes);
  }
  if (std::find(e.tensor.shape.begin(), e.tensor.shape.end(), 0) != e.tensor.shape.end()) bytes = 0, overflow = false;

  const auto offsets = info.find("data_offsets");
  if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2)
    throw io_error(at + "\"data_offsets\" is missing or not an array of two integers");
  const std::int64_t begin = non_negative((*offsets)[0]), end = non_negative((*offsets)[1]);
  if (begin < 0 || end < 0)
    throw io_error(at + "\"data_offsets\" " + offsets->dump() + " are not non-negative integers");
  e.begin = static_cast<std::uint64_t>(begin);
  e.end = static_cast<std::uint64_t>(end);
  if (e.begin > e.end || e.end > data_size)
    throw io_error(at + "data_offsets " + offsets->dump() + " are out of range for a data section of " +
                   std::to_string(data_size) + " bytes");
  if (overflow || e.end - e.begin != bytes)
    throw io_error(at + "shape " + e.tensor.shape_str() + " of " + dt_name + " needs " +
                   (overflow ? "more than 2^64" : std::to_string(bytes)) + " bytes, but data_offsets " +
                   offsets->dump() + " span " + std::to_string(e.end - e.begin));
  return e;
}

// ---- writing ----

// A file written in full to `path.tmp`, then renamed over `path`; removed if anything fails.
class atomic_file {
 public:
  explicit atomic_file(const std::string& path) : path_(path), tmp_(path + ".tmp") {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw io_error("safetensors: cannot create " + in_quotes(tmp_) + ": " + system_error_text());
  }
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;
  ~atomic_file() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  void write(const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) throw io_error("safetensors: cannot write " + in_quotes(tmp_) + ": " + system_error_text());
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  void commit() {
    if (::fsync(fd_) != 0) throw io_error("safetensors: cannot sync " + in_quotes(tmp_) + ": " + system_error_text());
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw io_error("safetensors: cannot close " + in_quotes(tmp_) + ": " + system_error_text());
    std::error_code ec;
    std::filesystem::rename(tmp_, path_, ec);
    if (ec)
      throw io_error("safetensors: cannot rename " + in_quotes(tmp_) + " to " + in_quotes(path_) + ": " + ec.message());
    committed_ = true;
    // Make the rename itself durable (best effort: some file systems refuse to sync directories).
    auto dir = std::filesystem::path(path_).parent_path();
    const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

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

template <class T>
stored_tensor to_stored(const tensor<T>& t) {
  stored_tensor s;
  s.type = storage_type_of<T>();
  s.shape.assign(t.shape().begin(), t.shape().end());
  const auto* p = reinterpret_cast<const std::byte*>(t.data());
  s.bytes.assign(p, p + t.size() * static_cast<std::int64_t>(sizeof(T)));
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

tensor_file read_safetensors(const std::string& path) {
  const std::string where = "safetensors: " + in_quotes(path) + ": ";
  const std::vector<std::byte> bytes = read_whole_file(path);
  if (bytes.size() < 8)
    throw io_error(where + "the file has " + std::to_string(bytes.size()) +
                   " bytes, fewer than the 8 of the header length");
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  const std::uint64_t rest = bytes.size() - 8;
  if (header_size > rest)
    throw io_error(where + "the header length " + std::to_string(header_size) + " is larger than the " +
                   std::to_string(rest) + " bytes that follow it");
  const std::uint64_t data_size = rest - header_size;
  const std::byte* data = bytes.data() + 8 + header_size;
  const json header =
      parse_header({reinterpret_cast<const char*>(bytes.data() + 8), static_cast<std::size_t>(header_size)}, where);

  tensor_file file;
  std::vector<header_entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == metadata_key) {
      if (!info.is_object()) throw io_error(where + "\"__metadata__\" is not a JSON object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) throw io_error(where + "metadata " + in_quotes(key) + " is not a string");
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, info, data_size, where));
  }

  // The tensors must tile the data section: no gap, no overlap, nothing left over.
  std::vector<const header_entry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const header_entry* a, const header_entry* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  std::uint64_t covered = 0;
  const header_entry* previous = nullptr;
  for (const header_entry* e : by_offset) {
    if (e->begin < covered)
      throw io_error(where + "tensors " + in_quotes(previous->name) + " and " + in_quotes(e->name) +
                     " overlap (bytes " + std::to_string(e->begin) + " to " + std::to_string(covered) + ")");
    if (e->begin > covered)
      throw io_error(where + "bytes " + std::to_string(covered) + " to " + std::to_string(e->begin) +
                     " of the data section belong to no tensor");
    covered = e->end;
    previous = e;
  }
  if (covered != data_size)
    throw io_error(where + "the data section has " + std::to_string(data_size) + " bytes but the tensors cover " +
                   std::to_string(covered));

  for (auto& e : entries) {
    e.tensor.bytes.assign(data + e.begin, data + e.end);
    file.tensors.emplace(std::move(e.name), std::move(e.tensor));
  }
  return file;
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

  atomic_file out(path);
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
    if (s.type != storage_type::f32 && s.type != storage_type::f64)
      differences.push_back(in_quotes(name) + ": dtype " + std::string(storage_name(s.type)) +
                            " in the file, expected F32 or F64");
    if (!std::equal(s.shape.begin(), s.shape.end(), e.value.shape().begin(), e.value.shape().end()))
      differences.push_back(in_quotes(name) + ": shape " + s.shape_str() + " in the file, " + e.value.dims().str() +
                            " in the store");
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
