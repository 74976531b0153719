// Hugging Face checkpoint folders: finding the files, checking the index against its shards,
// loading through a name map all-or-nothing, and writing one file or shards. The JSON files
// are parsed in hf_json.cpp.
#include "loom/io/hf_checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "../core/atomic_file.hpp"
#include "../core/text.hpp"
#include "regular_file.hpp"

namespace loom::hf {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;


std::string path_in(const std::string& folder, std::string_view file) { return (fs::path(folder) / file).string(); }

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// A whole file of at most max_json_bytes; throws io_error naming it.
std::string read_json_file(const std::string& path) {
  const std::string where = in_quotes(path) + ": ";
  const regular_file file(path, "");
  const int fd = file.fd();
  const std::uint64_t size = file.size();
  if (size > max_json_bytes)
    throw io_error(where + "has " + std::to_string(size) + " bytes, more than the limit of " +
                   std::to_string(max_json_bytes));
  std::string text(static_cast<std::size_t>(size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t r = ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw io_error(where + "cannot read: " + std::strerror(errno));
    if (r == 0) throw io_error(where + "the file ended early (was it changed while being read?)");
    done += static_cast<std::size_t>(r);
  }
  return text;
}

// At most `shown` names, then how many more.
std::string name_list(const std::vector<std::string>& names, std::size_t shown = 10) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < shown; ++i) s += (i ? ", " : "") + in_quotes(names[i]);
  if (names.size() > shown) s += " and " + std::to_string(names.size() - shown) + " more";
  return s;
}

// Reads the folder's files one at a time, checks each against the index (a shard holds exactly
// the tensors the index lists for it) and hands it to visit(file name, tensor_file&).
template <class Visit>
void for_each_file(const std::string& folder, const weight_index& index, Visit&& visit) {
  std::map<std::string_view, std::vector<std::string>> listed;  // file -> tensors the index puts there
  for (const auto& [name, file] : index.weight_map) listed[file].push_back(name);
  for (const std::string& file : index.files) {
    const std::string path = path_in(folder, file);
    tensor_file contents = read_safetensors(path);
    if (index.sharded) {
      std::vector<std::string> absent, unlisted;
      for (const std::string& name : listed[file])
        if (!contents.contains(name)) absent.push_back(name);
      for (const auto& [name, s] : contents.tensors) {
        auto it = index.weight_map.find(name);
        if (it == index.weight_map.end() || it->second != file) unlisted.push_back(name);
      }
      const std::string where = "checkpoint folder " + in_quotes(folder) + ": shard " + in_quotes(file) + " ";
      if (!absent.empty())
        throw io_error(where + "lacks " + std::to_string(absent.size()) + " tensors that " + std::string(index_file) +
                       " puts there: " + name_list(absent));
      if (!unlisted.empty())
        throw io_error(where + "holds " + std::to_string(unlisted.size()) + " tensors that " +
                       std::string(index_file) + " does not put there: " + name_list(unlisted));
    }
    visit(file, contents);
  }
}

// [a, b] -> [b, a]
template <class T>
tensor<T> transposed(const tensor<T>& t) {
  const std::int64_t rows = t.shape()[0], cols = t.shape()[1];
  tensor<T> r(dims_t{cols, rows});
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) r.data()[j * rows + i] = t.data()[i * cols + j];
  return r;
}

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The shape a parameter of `dims` has in the file under `transform`.
std::vector<std::int64_t> stored_shape(std::span<const std::int64_t> dims, layout transform) {
  std::vector<std::int64_t> shape(dims.begin(), dims.end());
  if (transform == layout::transposed && shape.size() == 2) std::swap(shape[0], shape[1]);
  return shape;
}

// The differences of a load: the first 10,000 lines kept, the rest only counted (a file of a
// million unexpected tensors must not make a million lines).
struct difference_list {
  std::vector<std::string> lines;
  std::size_t count = 0;
  void add(std::string line) {
    if (count++ < 10'000) lines.push_back(std::move(line));
  }
  bool empty() const { return count == 0; }
};

[[noreturn]] void throw_differences(const std::string& source, difference_list differences) {
  constexpr std::size_t shown = 50;
  const std::size_t n = differences.count;
  std::string what = source + " does not match the parameters (" + std::to_string(n) +
                     (n == 1 ? " difference" : " differences") + "; nothing was loaded):";
  for (std::size_t i = 0; i < differences.lines.size() && i < shown; ++i) what += "\n  - " + differences.lines[i];
  if (n > shown) what += "\n  ... and " + std::to_string(n - shown) + " more";
  throw load_mismatch_error(what, std::move(differences.lines));
}

// "model-00001-of-00002.safetensors"
std::string shard_name(std::size_t k, std::size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k, n);
  return name;
}

bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

bool is_shard_name(std::string_view f) {
  if (f.size() != 32 || !f.starts_with("model-") || f.substr(11, 4) != "-of-" || !f.ends_with(".safetensors"))
    return false;
  for (std::size_t i : {6, 7, 8, 9, 10, 15, 16, 17, 18, 19})
    if (f[i] < '0' || f[i] > '9') return false;
  return true;
}

}  // namespace

model_config read_config(const std::string& folder) {
  const std::string path = path_in(folder, config_file);
  return parse_config(read_json_file(path), path);
}

weight_index read_index(const std::string& folder) {
  const std::string single = path_in(folder, single_file), index = path_in(folder, index_file);
  const bool has_single = exists(single), has_index = exists(index);
  const std::string where = "checkpoint folder " + in_quotes(folder) + ": ";
  if (has_single && has_index)
    throw io_error(where + "holds both " + std::string(single_file) + " and " + std::string(index_file) +
                   ", so which is current is unclear; remove the stale one");
  if (has_single) {
    weight_index one;
    one.files = {std::string(single_file)};
    return one;
  }
  if (!has_index)
    throw io_error(where + "holds neither " + std::string(single_file) + " nor " + std::string(index_file));
  return parse_index(read_json_file(index), index);
}

tensor_file read_tensors(const std::string& folder) {
  const weight_index index = read_index(folder);
  tensor_file all;
  bool first = true;
  for_each_file(folder, index, [&](const std::string&, tensor_file& f) {
    if (first) all.metadata = std::move(f.metadata);
    first = false;
    all.tensors.merge(f.tensors);  // distinct names: each is in its own shard only
  });
  return all;
}

template <class T>
name_map same_names(const param_store<T>& params) {
  name_map names;
  for (const auto& [name, e] : params) names.emplace(name, tensor_source{name, layout::same});
  return names;
}

template <class T>
void load(const std::string& folder, param_store<T>& params, const name_map& names, load_options options) {
  const std::string source = "checkpoint folder " + in_quotes(folder);
  const weight_index index = read_index(folder);
  difference_list differences;
  // tensor name -> the parameters that read it
  std::map<std::string_view, std::vector<std::pair<const std::string*, const tensor_source*>>> readers;
  for (const auto& [name, src] : names) {
    if (!params.contains(name))
      differences.add("the mapping names parameter " + in_quotes(name) + ", which the store does not have");
    else
      readers[src.name].emplace_back(&name, &src);
  }
  for (const auto& [name, e] : params)
    if (!names.contains(name)) differences.add("parameter " + in_quotes(name) + " is not in the mapping");

  std::set<std::string_view> found;
  std::vector<std::pair<typename param_store<T>::entry*, tensor<T>>> staged;
  auto check_file = [&](const std::string&, tensor_file& file) {
    for (const auto& [tensor_name, s] : file.tensors) {
      auto it = readers.find(tensor_name);
      if (it == readers.end()) {
        if (options.strict)
          differences.add("unexpected tensor " + in_quotes(tensor_name) + " " + s.shape_str() +
                                ": no parameter reads it (load with strict = false to ignore it)");
        continue;
      }
      found.insert(it->first);
      for (const auto& [param, src] : it->second) {
        auto* entry = params.find(*param);
        const auto want = stored_shape(entry->value.shape(), src->transform);
        const std::string reader = "parameter " + in_quotes(*param) + " " + entry->value.dims().str() +
                                   (src->transform == layout::transposed ? ", transposed" : "");
        if (!is_floating(s.type))
          differences.add(in_quotes(tensor_name) + ": dtype " + std::string(storage_name(s.type)) +
                                " in the file, expected F32, F64, F16 or BF16 (" + reader + ")");
        if (src->transform == layout::transposed && entry->value.shape().size() != 2)
          differences.add(in_quotes(tensor_name) + ": a transposed load needs a 2-D parameter (" + reader + ")");
        else if (s.shape != want)
          differences.add(in_quotes(tensor_name) + ": shape " + s.shape_str() + " in the file, expected " +
                                shape_text(want) + " (" + reader + ")");
        else if (const std::int64_t bad = first_non_finite(s); bad >= 0 && !options.allow_non_finite)
          differences.add(non_finite_text(tensor_name, s, bad) +
                                " (load with allow_non_finite = true to accept it)");
        if (!differences.empty()) continue;  // nothing will load: convert no more
        tensor<T> value = to_tensor<T>(s);
        staged.emplace_back(entry, src->transform == layout::transposed ? transposed(value) : std::move(value));
      }
    }
  };
  for_each_file(folder, index, check_file);
  for (const auto& [tensor_name, by] : readers)
    if (!found.contains(tensor_name))
      for (const auto& [param, src] : by)
        differences.add("missing tensor " + in_quotes(tensor_name) + " (parameter " + in_quotes(*param) + " " +
                              params.value(*param).dims().str() + ")");
  if (!differences.empty()) throw_differences(source, std::move(differences));
  for (auto& [entry, value] : staged) entry->value = std::move(value);
}

template <class T>
void save(const std::string& folder, const param_store<T>& params, const name_map& names,
          const std::map<std::string, std::string>& config, const save_options& options) {
  const std::string where = "hf::save: " + in_quotes(folder) + ": ";
  if (!is_floating(options.dtype))
    throw value_error(where + "dtype " + std::string(storage_name(options.dtype)) +
                      " is not a floating dtype (F32, BF16, F64 or F16)");
  // Check everything before writing: the mapping, then the config.
  struct planned {
    const std::string* stored_name;
    const tensor<T>* value;
    layout transform;
    std::uint64_t bytes;
  };
  std::map<std::string_view, planned> plan;  // in stored-name order
  std::vector<std::string> unmapped;
  for (const auto& [name, e] : params)
    if (!names.contains(name)) unmapped.push_back(name);
  if (!unmapped.empty())
    throw value_error(where + std::to_string(unmapped.size()) + " parameters are not in the mapping: " +
                      name_list(unmapped));
  for (const auto& [name, src] : names) {
    const auto* e = params.find(name);
    if (!e) throw value_error(where + "the mapping names parameter " + in_quotes(name) + ", which the store does not have");
    if (src.name.empty() || src.name == "__metadata__" || !valid_utf8(src.name))
      throw value_error(where + "parameter " + in_quotes(name) + " maps to the name " + in_quotes(src.name) +
                        ", which a safetensors file cannot hold (empty, reserved or not UTF-8)");
    if (src.transform == layout::transposed && e->value.shape().size() != 2)
      throw value_error(where + "parameter " + in_quotes(name) + " " + e->value.dims().str() +
                        " is to be stored transposed, which needs 2 dims");
    const auto bytes = static_cast<std::uint64_t>(e->value.size()) * storage_size(options.dtype);
    auto [it, fresh] = plan.try_emplace(src.name, planned{&src.name, &e->value, src.transform, bytes});
    if (!fresh)
      throw value_error(where + "two parameters map to " + in_quotes(src.name) + " (one is " + in_quotes(name) + ")");
  }
  json config_json = json::object();
  for (const auto& [field, text] : config) {
    model_config one;
    try {
      one = parse_config("{\"v\":" + text + "}", "config field " + in_quotes(field));
    } catch (const io_error& e) {
      throw value_error(where + "config field " + in_quotes(field) + " is not one JSON value: " + e.what());
    }
    if (one.fields.size() != 1)
      throw value_error(where + "config field " + in_quotes(field) + " is not one JSON value: " + text);
    if (!valid_utf8(field)) throw value_error(where + "config field name " + in_quotes(field) + " is not UTF-8");
    config_json[field] = json::parse(one.fields.begin()->second.text);  // depth checked by parse_config
  }
  const std::string config_text = config_json.dump(2) + "\n";

  // Shards: tensors in name order, a new shard when the next would pass the limit.
  std::vector<std::vector<const planned*>> shards(1);
  std::uint64_t filled = 0, total = 0;
  for (const auto& [name, p] : plan) {
    if (options.max_shard_bytes > 0 && !shards.back().empty() && filled + p.bytes > options.max_shard_bytes)
      shards.emplace_back(), filled = 0;
    shards.back().push_back(&p);
    filled += p.bytes;
    total += p.bytes;
  }
  if (shards.size() > 99'999)
    throw value_error(where + "max_shard_bytes " + std::to_string(options.max_shard_bytes) + " makes " +
                      std::to_string(shards.size()) + " shards, more than the 99,999 that shard names number");

  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw io_error(where + "cannot create the folder: " + ec.message());
  const bool sharded = shards.size() > 1;
  std::set<std::string> written;
  json weight_map = json::object();
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const std::string file = sharded ? shard_name(k + 1, shards.size()) : std::string(single_file);
    std::vector<stored_tensor> stored;
    stored.reserve(shards[k].size());
    std::vector<tensor_bytes_view> views;
    for (const planned* p : shards[k]) {
      if (p->transform == layout::transposed)
        stored.push_back(to_stored(transposed(*p->value), options.dtype));
      else
        stored.push_back(to_stored(*p->value, options.dtype));
      views.push_back({*p->stored_name, stored.back().type, stored.back().shape, stored.back().bytes});
      weight_map[*p->stored_name] = file;
    }
    write_safetensors(path_in(folder, file), views, options.metadata);
    written.insert(file);
  }
  if (sharded) {
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    detail::write_file_atomically(path_in(folder, index_file), index.dump(2) + "\n", "hf::save");
  }
  detail::write_file_atomically(path_in(folder, config_file), config_text, "hf::save");

  // The other layout's files, left by an earlier save, would make the folder ambiguous.
  std::vector<std::string> stale;
  stale.emplace_back(sharded ? single_file : index_file);
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (is_shard_name(file) && !written.contains(file)) stale.push_back(file);
  }
  for (const std::string& file : stale) fs::remove(path_in(folder, file), ec);
}

#define LOOM_HF_INSTANTIATE(T)                                                                                  \
  template name_map same_names(const param_store<T>&);                                                          \
  template void load(const std::string&, param_store<T>&, const name_map&, load_options);                       \
  template void save(const std::string&, const param_store<T>&, const name_map&,                                \
                     const std::map<std::string, std::string>&, const save_options&);
LOOM_HF_INSTANTIATE(float)
LOOM_HF_INSTANTIATE(double)
#undef LOOM_HF_INSTANTIATE

}  // namespace loom::hf
