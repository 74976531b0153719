// Reading safetensors files from untrusted sources: every size read from the file is bounded
// before anything is allocated, the header is parsed in one pass (linear time, nesting bounded
// by the format's own: a flat object of flat objects), and tensor bytes are read straight from
// the file once every check has passed.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <iterator>
#include <limits>
#include <tuple>

#include <nlohmann/json.hpp>

#include "loom/io/safetensors.hpp"
#include "../core/text.hpp"
#include "regular_file.hpp"

namespace loom {

namespace {

using json = nlohmann::json;


constexpr std::string_view metadata_key = "__metadata__";

// Reads exactly n bytes at `offset`; false if the file ends first.
bool read_at(int fd, void* to, std::size_t n, std::uint64_t offset, const std::string& where) {
  auto* p = static_cast<char*>(to);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw io_error(where + "cannot read: " + std::strerror(errno));
    if (r == 0) return false;
    p += r, n -= static_cast<std::size_t>(r), offset += static_cast<std::uint64_t>(r);
  }
  return true;
}

// The header's bytes, read from the file in chunks, so that a large header is never held whole.
class header_source {
 public:
  header_source(int fd, std::uint64_t offset, std::uint64_t size, std::string where)
      : fd_(fd), offset_(offset), remaining_(size), where_(std::move(where)), buffer_(std::min<std::uint64_t>(size, 1 << 16)) {
    fill();
  }
  bool done() const { return pos_ == len_; }
  char current() const { return buffer_[pos_]; }
  void advance() {
    follow_strings(buffer_[pos_]);
    if (++pos_ == len_) fill();
  }

 private:
  void fill() {
    pos_ = 0;
    len_ = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, buffer_.size()));
    if (len_ > 0 && !read_at(fd_, buffer_.data(), len_, offset_, where_))
      throw io_error(where_ + "the file ended inside its header (was it changed while being read?)");
    offset_ += len_, remaining_ -= len_;
  }
  // JSON's strings, followed byte by byte: one longer than max_header_string_bytes is refused
  // here, before the parser has built it (its buffers hold up to ~7 bytes per string byte).
  void follow_strings(char c) {
    if (!in_string_) {
      in_string_ = c == '"';
      string_bytes_ = 0;
      return;
    }
    if (escaped_) escaped_ = false;
    else if (c == '\\') escaped_ = true;
    else if (c == '"') in_string_ = false;
    if (in_string_ && ++string_bytes_ > max_header_string_bytes)
      throw io_error(where_ + "a string in the header (a tensor name or metadata) is longer than the limit of " +
                     std::to_string(max_header_string_bytes) + " bytes");
  }
  int fd_;
  std::uint64_t offset_, remaining_;
  std::string where_;
  std::vector<char> buffer_;
  std::size_t pos_ = 0, len_ = 0;
  bool in_string_ = false, escaped_ = false;
  std::size_t string_bytes_ = 0;
};

// An input iterator over a header_source, for nlohmann's SAX parser; a null source is the end.
struct header_iterator {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = char;
  header_source* source = nullptr;
  char operator*() const { return source->current(); }
  header_iterator& operator++() {
    source->advance();
    return *this;
  }
  bool at_end() const { return !source || source->done(); }
  friend bool operator==(const header_iterator& a, const header_iterator& b) { return a.at_end() == b.at_end(); }
};

// Where a tensor's bytes are in the data section.
struct placement {
  std::uint64_t begin = 0, end = 0;
  const std::string* name = nullptr;
  stored_tensor* tensor = nullptr;
};

// The header as SAX events: {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
// ..., "__metadata__": {"<key>": "<value>", ...}}. Anything else stops the parse at once with a
// message: a value of the wrong type, an unknown field, a name given twice, or nesting deeper
// than the format's (so the parser's own depth never exceeds 3).
class header_parser {
 public:
  header_parser(std::string where, std::uint64_t data_size) : where_(std::move(where)), data_size_(data_size) {}

  tensor_file file;
  std::deque<placement> placements;  // a deque: no spare capacity, which a vector would double
  std::string error;

  bool null() { return value("null"); }
  bool boolean(bool b) { return value(b ? "true" : "false"); }
  bool number_integer(std::int64_t v) { return v < 0 ? value(std::to_string(v)) : integer(static_cast<std::uint64_t>(v)); }
  bool number_unsigned(std::uint64_t v) { return integer(v); }
  bool number_float(double, const std::string& text) { return value(text); }
  bool binary(json::binary_t&) { return value("binary data"); }
  bool string(std::string& s);
  bool start_object(std::size_t);
  bool key(std::string& k);
  bool end_object();
  bool start_array(std::size_t);
  bool end_array();
  bool parse_error(std::size_t, const std::string&, const json::exception& e) {
    return fail(where_ + "the header is not valid JSON (" + e.what() + ")");
  }

 private:
  enum class at { start, top, entry, metadata, shape, offsets, end };
  bool fail(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }
  std::string entry_where() const { return where_ + "tensor " + in_quotes(name_) + ": "; }
  bool value(const std::string& text);  // a value where the format has none of its kind
  bool integer(std::uint64_t v);
  bool finish_entry();

  std::string where_;
  std::uint64_t data_size_;
  at at_ = at::start;
  std::string name_;                 // the top-level key being read
  std::string field_;                // the entry's field, or the metadata key, being read
  stored_tensor* tensor_ = nullptr;  // the entry being read
  bool has_dtype_ = false, has_shape_ = false, has_offsets_ = false, has_metadata_ = false;
  std::vector<std::uint64_t> offsets_;
};

bool header_parser::value(const std::string& text) {
  switch (at_) {
    case at::start:
      return fail(where_ + "the header is not a JSON object");
    case at::top:
      if (name_ == metadata_key) return fail(where_ + "\"__metadata__\" is not a JSON object");
      return fail(entry_where() + "its entry is not a JSON object");
    case at::entry:
      if (field_ == "dtype") return fail(entry_where() + "\"dtype\" is missing or not a string");
      if (field_ == "shape") return fail(entry_where() + "\"shape\" is missing or not an array");
      return fail(entry_where() + "\"data_offsets\" is missing or not an array of two integers");
    case at::metadata:
      return fail(where_ + "metadata " + in_quotes(field_) + " is not a string");
    case at::shape:
      return fail(entry_where() + "\"shape\" holds " + text + ", not a non-negative integer");
    case at::offsets:
      return fail(entry_where() + "\"data_offsets\" holds " + text + ", not a non-negative integer");
    case at::end:
      break;
  }
  return fail(where_ + "the header holds more than one JSON value");
}

bool header_parser::integer(std::uint64_t v) {
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (at_ == at::shape) {
    if (v > max) return value(std::to_string(v));
    if (tensor_->shape.size() == max_stored_rank)
      return fail(entry_where() + "\"shape\" has more than " + std::to_string(max_stored_rank) + " dims");
    tensor_->shape.push_back(static_cast<std::int64_t>(v));
    return true;
  }
  if (at_ == at::offsets) {
    if (v > max) return value(std::to_string(v));
    if (offsets_.size() == 2) return fail(entry_where() + "\"data_offsets\" is not an array of two integers");
    offsets_.push_back(v);
    return true;
  }
  return value(std::to_string(v));
}

bool header_parser::string(std::string& s) {
  if (at_ == at::metadata) {
    file.metadata.emplace(field_, std::move(s));
    return true;
  }
  if (at_ != at::entry || field_ != "dtype") return value(in_quotes(s));
  for (storage_type t : {storage_type::f32, storage_type::f64, storage_type::i32, storage_type::i64, storage_type::u8,
                         storage_type::boolean, storage_type::f16, storage_type::bf16})
    if (storage_name(t) == s) {
      tensor_->type = t;
      has_dtype_ = true;
      return true;
    }
  return fail(entry_where() + "unsupported dtype " + in_quotes(s) + " (loom reads F32, F64, F16, BF16, I32, I64, U8, BOOL)");
}

bool header_parser::start_object(std::size_t) {
  if (at_ == at::start) {
    at_ = at::top;
    return true;
  }
  if (at_ != at::top) return value("an object");
  if (name_ == metadata_key) {
    if (has_metadata_) return fail(where_ + "the header names \"__metadata__\" twice");
    has_metadata_ = true;
    at_ = at::metadata;
    return true;
  }
  if (file.tensors.size() == max_stored_tensors)
    return fail(where_ + "the header lists more than " + std::to_string(max_stored_tensors) + " tensors");
  auto [it, fresh] = file.tensors.try_emplace(name_);
  if (!fresh) return fail(where_ + "the header names " + in_quotes(name_) + " twice");
  tensor_ = &it->second;
  placements.push_back({0, 0, &it->first, tensor_});
  has_dtype_ = has_shape_ = has_offsets_ = false;
  offsets_.clear();
  at_ = at::entry;
  return true;
}

bool header_parser::key(std::string& k) {
  if (at_ == at::top) {
    name_ = std::move(k);
  } else if (at_ == at::metadata) {
    if (file.metadata.contains(k)) return fail(where_ + "the header names metadata " + in_quotes(k) + " twice");
    if (file.metadata.size() == max_metadata_entries)
      return fail(where_ + "the header has more than " + std::to_string(max_metadata_entries) + " metadata entries");
    field_ = std::move(k);
  } else {  // at::entry
    bool* seen = k == "dtype" ? &has_dtype_ : k == "shape" ? &has_shape_ : k == "data_offsets" ? &has_offsets_ : nullptr;
    if (!seen) return fail(entry_where() + "unknown field " + in_quotes(k));
    if (*seen) return fail(entry_where() + "the header names " + in_quotes(k) + " twice");
    field_ = std::move(k);
  }
  return true;
}

bool header_parser::start_array(std::size_t) {
  if (at_ == at::entry && field_ == "shape") {
    has_shape_ = true;
    at_ = at::shape;
    return true;
  }
  if (at_ == at::entry && field_ == "data_offsets") {
    has_offsets_ = true;
    at_ = at::offsets;
    return true;
  }
  return value("an array");
}

bool header_parser::end_array() {
  if (at_ == at::offsets && offsets_.size() != 2)
    return fail(entry_where() + "\"data_offsets\" is not an array of two integers");
  if (at_ == at::shape) tensor_->shape.shrink_to_fit();  // 8 bytes per dim, no spare capacity
  at_ = at::entry;
  return true;
}

bool header_parser::end_object() {
  if (at_ == at::entry) {
    if (!finish_entry()) return false;
  } else if (at_ == at::top) {
    at_ = at::end;
    return true;
  }
  at_ = at::top;
  return true;
}

// Checks one entry as soon as it is complete: its fields, and that its offsets lie in the data
// section and span exactly the bytes its shape needs.
bool header_parser::finish_entry() {
  const std::string at = entry_where();
  if (!has_dtype_) return fail(at + "\"dtype\" is missing or not a string");
  if (!has_shape_) return fail(at + "\"shape\" is missing or not an array");
  if (!has_offsets_) return fail(at + "\"data_offsets\" is missing or not an array of two integers");
  // numel · dtype size; a shape whose size overflows 64 bits cannot match any offsets
  std::uint64_t bytes = storage_size(tensor_->type);
  bool overflow = false;
  for (std::int64_t d : tensor_->shape)
    overflow = overflow || __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes);
  if (std::find(tensor_->shape.begin(), tensor_->shape.end(), 0) != tensor_->shape.end()) bytes = 0, overflow = false;
  placement& p = placements.back();
  p.begin = offsets_[0];
  p.end = offsets_[1];
  const std::string offsets_text = "[" + std::to_string(p.begin) + ", " + std::to_string(p.end) + "]";
  if (p.begin > p.end || p.end > data_size_)
    return fail(at + "data_offsets " + offsets_text + " are out of range for a data section of " +
                std::to_string(data_size_) + " bytes");
  if (overflow || p.end - p.begin != bytes)
    return fail(at + "shape " + tensor_->shape_str() + " of " + std::string(storage_name(tensor_->type)) + " needs " +
                (overflow ? "more than 2^64" : std::to_string(bytes)) + " bytes, but data_offsets " + offsets_text +
                " span " + std::to_string(p.end - p.begin));
  return true;
}

// The tensors must tile the data section: no gap, no overlap, nothing left over.
void check_tiling(std::deque<placement>& placements, std::uint64_t data_size, const std::string& where) {
  std::sort(placements.begin(), placements.end(),
            [](const placement& a, const placement& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  std::uint64_t covered = 0;
  const placement* previous = nullptr;
  for (const placement& p : placements) {
    if (p.begin < covered)
      throw io_error(where + "tensors " + in_quotes(*previous->name) + " and " + in_quotes(*p.name) +
                     " overlap (bytes " + std::to_string(p.begin) + " to " + std::to_string(covered) + ")");
    if (p.begin > covered)
      throw io_error(where + "bytes " + std::to_string(covered) + " to " + std::to_string(p.begin) +
                     " of the data section belong to no tensor");
    covered = p.end;
    previous = &p;
  }
  if (covered != data_size)
    throw io_error(where + "the data section has " + std::to_string(data_size) + " bytes but the tensors cover " +
                   std::to_string(covered));
}

}  // namespace

tensor_file read_safetensors(const std::string& path) {
  const std::string where = "safetensors: " + in_quotes(path) + ": ";
  const regular_file file(path, "safetensors: ");
  const int fd = file.fd();
  const std::uint64_t file_size = file.size();

  std::uint64_t header_size = 0;
  if (file_size < 8 || !read_at(fd, &header_size, 8, 0, where))
    throw io_error(where + "the file has " + std::to_string(file_size) + " bytes, fewer than the 8 of the header length");
  const std::uint64_t rest = file_size - 8;
  if (header_size > rest)
    throw io_error(where + "the header length " + std::to_string(header_size) + " is larger than the " +
                   std::to_string(rest) + " bytes that follow it");
  if (header_size > max_header_bytes)
    throw io_error(where + "the header length " + std::to_string(header_size) + " is larger than the limit of " +
                   std::to_string(max_header_bytes) + " bytes");
  const std::uint64_t data_size = rest - header_size;

  header_parser parser(where, data_size);
  header_source source(fd, 8, header_size, where);
  bool parsed = false;
  try {
    parsed = json::sax_parse(header_iterator{&source}, header_iterator{}, &parser);
  } catch (const json::exception& e) {  // not expected from a SAX parse; kept as a safety net
    throw io_error(where + "the header is not valid JSON (" + e.what() + ")");
  }
  if (!parsed) throw io_error(parser.error.empty() ? where + "the header is not valid JSON" : parser.error);

  check_tiling(parser.placements, data_size, where);
  // Every check passed: the bytes of all tensors add up to the data section, within the file.
  for (const placement& p : parser.placements) {
    p.tensor->bytes.resize(static_cast<std::size_t>(p.end - p.begin));
    if (!read_at(fd, p.tensor->bytes.data(), p.tensor->bytes.size(), 8 + header_size + p.begin, where))
      throw io_error(where + "the file ended inside the data of " + in_quotes(*p.name) +
                     " (was it changed while being read?)");
  }
  return std::move(parser.file);
}

}  // namespace loom
