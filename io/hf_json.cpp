// The JSON files of a Hugging Face checkpoint folder, read as hostile input: config.json (a
// flat view of its top-level fields) and model.safetensors.index.json. Both are parsed in one
// pass by nlohmann's SAX parser (iterative: no recursion, whatever the nesting), with the depth,
// the counts and the names checked as the events arrive.
#include <algorithm>
#include <charconv>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "loom/io/hf_checkpoint.hpp"

namespace loom::hf {

namespace {

using json = nlohmann::json;
using kind = json_field::kind;

std::string json_quoted(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// A text for a message: at most `limit` bytes of it (names and values come from the file).
std::string shown(const std::string& text, std::size_t limit = 200) {
  return text.size() <= limit ? text : text.substr(0, limit) + "... (" + std::to_string(text.size()) + " bytes)";
}

// Compact JSON text of nested values, built from SAX events: commas between the members of
// each open object or array, none right after a key.
class json_text {
 public:
  void begin(std::string& out) {
    out_ = &out;
    filled_.clear();
    after_key_ = false;
  }
  bool active() const { return !filled_.empty(); }
  std::size_t depth() const { return filled_.size(); }
  void scalar(std::string_view text) {
    separate();
    out_->append(text);
  }
  void key(const std::string& k) {
    separate();
    out_->append(json_quoted(k));
    out_->push_back(':');
    after_key_ = true;
  }
  void open(char bracket) {
    separate();
    out_->push_back(bracket);
    filled_.push_back(false);
  }
  void close(char bracket) {
    out_->push_back(bracket);
    filled_.pop_back();
  }

 private:
  void separate() {
    if (after_key_) {
      after_key_ = false;
    } else if (!filled_.empty()) {
      if (filled_.back()) out_->push_back(',');
      filled_.back() = true;
    }
  }
  std::string* out_ = nullptr;
  std::vector<bool> filled_;  // per open container: whether it has a member yet
  bool after_key_ = false;
};

// The fields of one JSON object from the SAX events between its braces: each value's kind and
// text, nested values as compact text. `depth` is the nesting of the object itself.
class field_reader {
 public:
  field_reader(std::map<std::string, json_field, std::less<>>& fields, std::string where, std::size_t depth)
      : fields_(fields), where_(std::move(where)), depth_(depth) {}
  std::string error;

  /// Whether the events are inside a field's nested value (else they are the object's own).
  bool nested() const { return text_.active(); }
  bool key(std::string& k) {
    if (nested()) {
      text_.key(k);
      return true;
    }
    if (fields_.size() == max_json_fields)
      return fail(where_ + "more than " + std::to_string(max_json_fields) + " fields");
    auto [it, fresh] = fields_.try_emplace(std::move(k));
    if (!fresh) return fail(where_ + "field " + json_quoted(it->first) + " is given twice");
    name_ = &it->first;
    field_ = &it->second;
    return true;
  }
  bool scalar(kind type, std::string_view text) {
    if (nested()) {
      text_.scalar(text);
    } else {
      field_->type = type;
      field_->text = text;
    }
    return true;
  }
  bool open(char bracket) {
    if (!nested()) {
      field_->type = bracket == '{' ? kind::object : kind::array;
      text_.begin(field_->text);
    }
    if (depth_ + text_.depth() + 1 > max_json_depth)
      return fail(where_ + "field " + json_quoted(*name_) + " nests deeper than " + std::to_string(max_json_depth) +
                  " levels");
    text_.open(bracket);
    return true;
  }
  bool close(char bracket) {
    text_.close(bracket);
    return true;
  }

 private:
  bool fail(const std::string& message) {
    if (error.empty()) error = shown(message, 1000);
    return false;
  }
  std::map<std::string, json_field, std::less<>>& fields_;
  std::string where_;
  std::size_t depth_;
  const std::string* name_ = nullptr;
  json_field* field_ = nullptr;
  json_text text_;
};

// The SAX events every parser here maps to its own few: a scalar (kind, text, the string's
// value), an opening or closing bracket, a key.
template <class Self>
class sax_base {
 public:
  bool null() { return self().scalar(kind::null, "null", nullptr); }
  bool boolean(bool b) { return self().scalar(kind::boolean, b ? "true" : "false", nullptr); }
  bool number_integer(std::int64_t v) { return self().scalar(kind::integer, std::to_string(v), nullptr); }
  bool number_unsigned(std::uint64_t v) { return self().scalar(kind::integer, std::to_string(v), nullptr); }
  bool number_float(double, const std::string& text) { return self().scalar(kind::number, text, nullptr); }
  bool string(std::string& s) { return self().scalar(kind::string, json_quoted(s), &s); }
  bool binary(json::binary_t&) { return fail(where + "binary data is not JSON"); }
  bool start_object(std::size_t) { return self().open('{'); }
  bool end_object() { return self().close('}'); }
  bool start_array(std::size_t) { return self().open('['); }
  bool end_array() { return self().close(']'); }
  bool parse_error(std::size_t, const std::string&, const json::exception& e) {
    return fail(where + "not valid JSON (" + e.what() + ")");
  }

  std::string where;
  std::string error;

 protected:
  explicit sax_base(std::string_view source) : where(std::string(source) + ": ") {}
  bool fail(const std::string& message) {
    if (error.empty()) error = shown(message, 1000);
    return false;
  }

 private:
  Self& self() { return static_cast<Self&>(*this); }
};

// Runs a parser over text; throws io_error with its message on failure.
template <class Parser>
void run(Parser& parser, std::string_view text) {
  bool parsed = false;
  try {
    parsed = json::sax_parse(text.data(), text.data() + text.size(), &parser);
  } catch (const json::exception& e) {  // not expected from a SAX parse; kept as a safety net
    throw io_error(parser.where + "not valid JSON (" + e.what() + ")");
  }
  if (!parsed) throw io_error(parser.error.empty() ? parser.where + "not valid JSON" : parser.error);
}

class config_parser : public sax_base<config_parser> {
 public:
  explicit config_parser(std::string_view source) : sax_base(source), reader_(config.fields, where, 1) {}
  model_config config;

  bool scalar(kind type, std::string_view text, std::string*) {
    if (!started_) return fail(where + "not a JSON object");
    return reader_.scalar(type, text);
  }
  bool key(std::string& k) { return reader_.key(k) || fail(reader_.error); }
  bool open(char bracket) {
    if (!started_) {
      started_ = true;
      return bracket == '{' || fail(where + "not a JSON object");
    }
    return reader_.open(bracket) || fail(reader_.error);
  }
  bool close(char bracket) { return !reader_.nested() || reader_.close(bracket); }

 private:
  bool started_ = false;
  field_reader reader_;
};

// A shard name must be a plain file name in the folder.
std::string file_name_fault(std::string_view f) {
  if (f.empty()) return "is empty";
  if (f.size() > 255) return "is longer than 255 bytes";
  if (f == "." || f == "..") return "is not a file name";
  if (f.find_first_of(std::string_view("/\\\0", 3)) != std::string_view::npos)
    return "is not a plain file name in the folder (it holds '/', '\\' or NUL)";
  if (!f.ends_with(".safetensors")) return "does not end in .safetensors";
  return {};
}

// {"metadata": {...}, "weight_map": {"<tensor>": "<file>", ...}, <other fields, ignored>}
class index_parser : public sax_base<index_parser> {
 public:
  explicit index_parser(std::string_view source) : sax_base(source), metadata_(index.metadata, where + "metadata: ", 2) {}
  weight_index index;
  std::set<std::string, std::less<>> files;
  bool has_weight_map = false;

  bool scalar(kind type, std::string_view text, std::string* s) {
    switch (at_) {
      case at::start:
        return fail(where + "not a JSON object");
      case at::top:
        if (field_ == "weight_map" || field_ == "metadata")
          return fail(where + json_quoted(field_) + " is " + std::string(text) + ", not a JSON object");
        return true;
      case at::weight_map:
        return file(s, text);
      case at::metadata:
        return metadata_.scalar(type, text);
      case at::skip:
        return true;
    }
    return true;
  }
  bool key(std::string& k) {
    switch (at_) {
      case at::top:
        field_ = std::move(k);
        return true;
      case at::weight_map:
        if (index.weight_map.size() == max_stored_tensors)
          return fail(where + "weight_map names more than " + std::to_string(max_stored_tensors) + " tensors");
        if (index.weight_map.contains(k)) return fail(where + "weight_map names " + json_quoted(k) + " twice");
        tensor_ = std::move(k);
        return true;
      case at::metadata:
        return metadata_.key(k) || fail(metadata_.error);
      default:
        return true;
    }
  }
  bool open(char bracket) {
    switch (at_) {
      case at::start:
        at_ = at::top;
        return bracket == '{' || fail(where + "not a JSON object");
      case at::top:
        if (field_ == "weight_map" || field_ == "metadata") {
          bool& seen = field_ == "weight_map" ? has_weight_map : has_metadata_;
          if (seen) return fail(where + json_quoted(field_) + " is given twice");
          seen = true;
          if (bracket != '{') return fail(where + json_quoted(field_) + " is an array, not a JSON object");
          at_ = field_ == "weight_map" ? at::weight_map : at::metadata;
          return true;
        }
        at_ = at::skip;
        skipped_ = 1;
        return true;
      case at::weight_map:
        return fail(where + "weight_map " + json_quoted(tensor_) + " is an " + (bracket == '{' ? "object" : "array") +
                    ", not a file name");
      case at::metadata:
        return metadata_.open(bracket) || fail(metadata_.error);
      case at::skip:
        if (1 + ++skipped_ > max_json_depth)
          return fail(where + "field " + json_quoted(field_) + " nests deeper than " + std::to_string(max_json_depth) +
                      " levels");
        return true;
    }
    return true;
  }
  bool close(char bracket) {
    switch (at_) {
      case at::metadata:
        if (metadata_.nested()) return metadata_.close(bracket);
        at_ = at::top;
        return true;
      case at::skip:
        if (--skipped_ == 0) at_ = at::top;
        return true;
      case at::weight_map:
        at_ = at::top;
        return true;
      default:  // the top object
        return true;
    }
  }

 private:
  enum class at { start, top, weight_map, metadata, skip };
  bool file(const std::string* s, std::string_view text) {
    if (!s) return fail(where + "weight_map " + json_quoted(tensor_) + " is " + std::string(text) + ", not a file name");
    if (const std::string fault = file_name_fault(*s); !fault.empty())
      return fail(where + "weight_map " + json_quoted(tensor_) + ": file " + json_quoted(*s) + " " + fault);
    auto it = files.find(*s);
    if (it == files.end()) {
      if (files.size() == max_shards)
        return fail(where + "weight_map names more than " + std::to_string(max_shards) + " files");
      it = files.insert(*s).first;
    }
    index.weight_map.emplace(std::move(tensor_), *it);
    return true;
  }
  at at_ = at::start;
  std::string field_, tensor_;
  std::size_t skipped_ = 0;
  bool has_metadata_ = false;
  field_reader metadata_;
};

// The depth of brackets in JSON text, strings skipped (for texts parsed into a DOM).
std::size_t bracket_depth(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// A JSON value from a text, as a DOM; nullopt if the text is not JSON or nests too deep.
std::optional<json> value_of(std::string_view text) {
  if (bracket_depth(text) > max_json_depth) return std::nullopt;
  json v = json::parse(text, nullptr, false);
  if (v.is_discarded()) return std::nullopt;
  return v;
}

const json_field& field_of(const model_config& c, std::string_view name) {
  auto it = c.fields.find(name);
  if (it == c.fields.end()) throw missing_error("config.json has no field " + json_quoted(std::string(name)));
  return it->second;
}

[[noreturn]] void wrong_kind(std::string_view name, const json_field& f, std::string_view wanted) {
  throw value_error("config.json: field " + json_quoted(std::string(name)) + " is " + shown(f.text) + ", not " +
                    std::string(wanted));
}

}  // namespace

std::int64_t model_config::integer(std::string_view name) const {
  const json_field& f = field_of(*this, name);
  std::int64_t v = 0;
  const char* end = f.text.data() + f.text.size();
  if (f.type != kind::integer || std::from_chars(f.text.data(), end, v).ptr != end)
    wrong_kind(name, f, "an integer of 64 bits");
  return v;
}

double model_config::number(std::string_view name) const {
  const json_field& f = field_of(*this, name);
  double v = 0;
  const char* end = f.text.data() + f.text.size();
  if ((f.type != kind::integer && f.type != kind::number) || std::from_chars(f.text.data(), end, v).ptr != end)
    wrong_kind(name, f, "a number");
  return v;
}

bool model_config::boolean(std::string_view name) const {
  const json_field& f = field_of(*this, name);
  if (f.type != kind::boolean) wrong_kind(name, f, "true or false");
  return f.text == "true";
}

std::string model_config::string(std::string_view name) const {
  const json_field& f = field_of(*this, name);
  if (f.type != kind::string) wrong_kind(name, f, "a string");
  return json::parse(f.text).get<std::string>();
}

model_config parse_config(std::string_view text, std::string_view source) {
  config_parser parser(source);
  run(parser, text);
  return std::move(parser.config);
}

weight_index parse_index(std::string_view text, std::string_view source) {
  index_parser parser(source);
  run(parser, text);
  if (!parser.has_weight_map) throw io_error(parser.where + "no \"weight_map\" object");
  parser.index.sharded = true;
  parser.index.files.assign(parser.files.begin(), parser.files.end());
  return std::move(parser.index);
}

std::vector<std::string> config_differences(const model_config& file,
                                            const std::map<std::string, std::string>& expected) {
  std::vector<std::string> differences;
  for (const auto& [name, text] : expected) {
    const std::optional<json> want = value_of(text);
    if (!want)
      throw value_error("config_differences: the expected value of " + json_quoted(name) + ", " + shown(text) +
                        ", is not JSON");
    auto it = file.fields.find(name);
    if (it == file.fields.end()) {
      differences.push_back(name + ": not in the file (model " + shown(text) + ")");
      continue;
    }
    const std::optional<json> have = value_of(it->second.text);
    if (!have || *have != *want) differences.push_back(name + ": file " + shown(it->second.text) + ", model " + shown(text));
  }
  return differences;
}

void check_config(const model_config& file, const std::map<std::string, std::string>& expected,
                  std::string_view source) {
  std::vector<std::string> differences = config_differences(file, expected);
  if (differences.empty()) return;
  std::string what = std::string(source) + " does not match the model";
  if (differences.size() == 1) {
    what += ": " + differences[0];
  } else {
    what += " (" + std::to_string(differences.size()) + " fields):";
    for (const auto& d : differences) what += "\n  - " + d;
  }
  throw load_mismatch_error(what, std::move(differences));
}

}  // namespace loom::hf
