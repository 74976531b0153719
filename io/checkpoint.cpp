// Checkpoints: parameters + optimizer state + metadata in one safetensors file.
#include "loom/io/checkpoint.hpp"
#include "../core/text.hpp"

#include <charconv>

namespace loom {

namespace {

constexpr std::string_view buffer_prefix = "optimizer.";  // tensors: optimizer.<kind>.<param>
constexpr std::string_view format_key = "loom.checkpoint";
constexpr std::string_view optimizer_key = "optimizer";
constexpr std::string_view step_key = "optimizer.step";


bool reserved(std::string_view key) {
  return key.starts_with("optimizer") || key.starts_with("loom.");
}

std::map<std::string, std::string> user_metadata(const std::map<std::string, std::string>& all) {
  std::map<std::string, std::string> r;
  for (const auto& [k, v] : all)
    if (!reserved(k)) r.emplace(k, v);
  return r;
}

[[noreturn]] void throw_mismatch(const std::string& path, std::vector<std::string> differences) {
  std::string what = "checkpoint " + in_quotes(path) + " does not match (" + std::to_string(differences.size()) +
                     (differences.size() == 1 ? " difference" : " differences") + "; nothing was loaded):";
  for (const auto& d : differences) what += "\n  - " + d;
  throw load_mismatch_error(what, std::move(differences));
}

}  // namespace

namespace {
// Writes params, opt's kind, step and hyperparameters and `state` (opt's own, or a sharded
// optimizer's whole state, checked as such when `whole`).
template <class T>
void write_checkpoint(const std::string& path, const param_store<T>& params, const optimizer<T>& opt,
                      const optimizer_state<T>& state, bool whole,
                      const std::map<std::string, std::string>& metadata) {
  const std::string where = "save_checkpoint: " + in_quotes(path) + ": ";
  if (&opt.params() != &params) throw value_error(where + "the optimizer updates another parameter store");
  if (!whole && opt.sharded())
    throw value_error(where + "the optimizer holds only its shard of the state: save with "
                              "distributed::save_checkpoint, which gathers it (or distributed::gather_optimizer first)");
  std::map<std::string, std::string> all;
  for (const auto& [key, value] : metadata) {
    if (reserved(key))
      throw value_error(where + "metadata key " + in_quotes(key) +
                        " is reserved (keys starting with \"optimizer\" or \"loom.\")");
    all.emplace(key, value);
  }
  if (auto problems = opt.state_differences(state, whole); !problems.empty())
    throw value_error(where + "the optimizer's state is incomplete: " + problems.front() +
                      " (were parameters added after its first step?)");
  all[std::string(format_key)] = "1";
  all[std::string(optimizer_key)] = std::string(opt.name());
  all[std::string(step_key)] = std::to_string(state.step);
  for (const auto& [key, value] : opt.hyperparameters()) all[std::string(buffer_prefix) + key] = value;

  std::vector<std::string> buffer_names;  // owns the names the views refer to
  std::vector<const tensor<T>*> buffers;
  for (const auto& [kind, by_param] : state.buffers)
    for (const auto& [param, buf] : by_param) {
      buffer_names.push_back(std::string(buffer_prefix) + kind + "." + param);
      buffers.push_back(&buf);
    }
  std::vector<tensor_bytes_view> views;
  for (const auto& [name, e] : params) {
    if (name.starts_with(buffer_prefix))
      throw value_error(where + "parameter " + in_quotes(name) + ": names starting with \"optimizer.\" are reserved");
    views.push_back({name, storage_type_of<T>(), e.value.shape(), std::as_bytes(e.value.values())});
  }
  for (std::size_t i = 0; i < buffers.size(); ++i)
    views.push_back({buffer_names[i], storage_type_of<T>(), buffers[i]->shape(), std::as_bytes(buffers[i]->values())});
  write_safetensors(path, views, all);
}
}  // namespace

template <class T>
void save_checkpoint(const std::string& path, const param_store<T>& params, const optimizer<T>& opt,
                     const std::map<std::string, std::string>& metadata) {
  write_checkpoint(path, params, opt, opt.state(), false, metadata);
}

template <class T>
void save_checkpoint(const std::string& path, const param_store<T>& params, const optimizer<T>& opt,
                     const optimizer_state<T>& whole_state, const std::map<std::string, std::string>& metadata) {
  write_checkpoint(path, params, opt, whole_state, true, metadata);
}

template <class T>
std::map<std::string, std::string> load_checkpoint(const std::string& path, param_store<T>& params, optimizer<T>& opt,
                                                   load_options options) {
  if (&opt.params() != &params)
    throw value_error("load_checkpoint: " + in_quotes(path) + ": the optimizer updates another parameter store");
  const tensor_file file = read_safetensors(path);
  auto differences = param_differences(file, params, options, buffer_prefix);

  // The optimizer's kind and step count.
  optimizer_state<T> state;
  auto kind = file.metadata.find(std::string(optimizer_key));
  if (kind == file.metadata.end())
    differences.push_back("the file holds no optimizer state (no \"optimizer\" in its metadata)");
  else if (kind->second != opt.name())
    differences.push_back("the file holds " + in_quotes(kind->second) + " state, the optimizer is " +
                          in_quotes(opt.name()));
  auto step = file.metadata.find(std::string(step_key));
  if (step == file.metadata.end()) {
    differences.push_back("no \"optimizer.step\" in the metadata");
  } else {
    const std::string& s = step->second;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), state.step);
    if (ec != std::errc() || end != s.data() + s.size() || state.step < 0)
      differences.push_back("\"optimizer.step\" is " + in_quotes(s) + ", not a step count");
  }

  // The buffers: optimizer.<kind>.<param>, converted to T.
  for (const auto& [name, stored] : file.tensors) {
    if (!name.starts_with(buffer_prefix)) continue;
    const std::string rest = name.substr(buffer_prefix.size());
    const auto dot = rest.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == rest.size()) {
      differences.push_back("tensor " + in_quotes(name) + " is not named optimizer.<kind>.<parameter>");
      continue;
    }
    if (!is_floating(stored.type)) {
      differences.push_back(in_quotes(name) + ": dtype " + std::string(storage_name(stored.type)) +
                            " in the file, expected F32, F64, F16 or BF16");
      continue;
    }
    if (const std::int64_t bad = first_non_finite(stored); bad >= 0 && !options.allow_non_finite) {
      differences.push_back(non_finite_text(name, stored, bad) + " (load with allow_non_finite = true to accept it)");
      continue;
    }
    try {
      state.buffers[rest.substr(0, dot)][rest.substr(dot + 1)] = to_tensor<T>(stored);
    } catch (const shape_error& e) {
      differences.push_back(in_quotes(name) + ": " + e.what());
    }
  }
  for (auto& d : opt.state_differences(state)) differences.push_back("optimizer state: " + d);
  if (!differences.empty()) throw_mismatch(path, std::move(differences));

  assign_params(file, params, options, buffer_prefix, "checkpoint " + in_quotes(path));
  opt.load_state(std::move(state));
  return user_metadata(file.metadata);
}

template <class T>
std::map<std::string, std::string> load_checkpoint(const std::string& path, param_store<T>& params,
                                                   load_options options) {
  const tensor_file file = read_safetensors(path);
  assign_params(file, params, options, buffer_prefix, "checkpoint " + in_quotes(path));
  return user_metadata(file.metadata);
}

#define LOOM_CHECKPOINT_INSTANTIATE(T)                                                                            \
  template void save_checkpoint(const std::string&, const param_store<T>&, const optimizer<T>&,                   \
                                const std::map<std::string, std::string>&);                                       \
  template void save_checkpoint(const std::string&, const param_store<T>&, const optimizer<T>&,                   \
                                const optimizer_state<T>&, const std::map<std::string, std::string>&);            \
  template std::map<std::string, std::string> load_checkpoint(const std::string&, param_store<T>&, optimizer<T>&, \
                                                              load_options);                                      \
  template std::map<std::string, std::string> load_checkpoint(const std::string&, param_store<T>&, load_options);
LOOM_CHECKPOINT_INSTANTIATE(float)
LOOM_CHECKPOINT_INSTANTIATE(double)
#undef LOOM_CHECKPOINT_INSTANTIATE

}  // namespace loom
