// PyTorch state_dicts <-> loom parameter stores (see include/loom/io/torch_import.hpp).
//
// Import is two passes: plan (map every file tensor of the module to a loom name, combine
// separate projections, compare with the store, collect every difference), then, only when
// there is none, convert everything and assign. So a failed import changes nothing.
#include "loom/io/torch_import.hpp"
#include "../core/text.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <optional>

namespace loom::pytorch {

namespace {


std::string with_dot(std::string_view prefix) {
  std::string p(prefix);
  if (!p.empty() && p.back() != '.') p += '.';
  return p;
}

/// Which module an import or export is about: it decides which relative names belong to it.
enum class family { attention, transformer };

constexpr std::string_view attention_names[] = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
constexpr std::string_view separate_names[] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};

/// True when `relative` (a name with the module's prefix removed) is one of the module's.
bool belongs(family f, std::string_view relative) {
  if (f == family::attention)
    return std::find(std::begin(attention_names), std::end(attention_names), relative) != std::end(attention_names);
  return relative.starts_with("encoder.") || relative.starts_with("decoder.");
}

/// True for a file tensor of the module on the torch side (see import_options::strict).
bool torch_side_belongs(family f, std::string_view relative) {
  return f == family::attention || belongs(f, relative);
}

bool is_bias(std::string_view name) {
  return name == "bias" || name.ends_with(".bias") || name.ends_with("_bias");
}

bool is_float(const stored_tensor& s) {
  return is_floating(s.type);
}

std::string_view family_name(family f) {
  return f == family::attention ? "MultiheadAttention" : "Transformer";
}

/// The module's name prefix in an attention parameter name: "decoder.layers.0.self_attn."
/// for "decoder.layers.0.self_attn.q_proj_weight", "" for "q_proj_weight".
std::optional<std::pair<std::string, int>> separate_projection(std::string_view relative) {
  for (int i = 0; i < 3; ++i) {
    const std::string_view s = separate_names[i];
    if (relative == s) return std::pair<std::string, int>{"", i};
    if (relative.ends_with(s) && relative[relative.size() - s.size() - 1] == '.')
      return std::pair<std::string, int>{std::string(relative.substr(0, relative.size() - s.size())), i};
  }
  return std::nullopt;
}

/// A stored F64 tensor with the rows of q, k and v (each [D, D]) one after the other: [3D, D].
stored_tensor concatenate_rows(const stored_tensor* qkv[3]) {
  stored_tensor r;
  r.type = storage_type::f64;
  r.shape = {3 * qkv[0]->shape[0], qkv[0]->shape[1]};
  for (int i = 0; i < 3; ++i) {
    const tensor<double> part = to_tensor<double>(*qkv[i]);
    const auto bytes = std::as_bytes(part.values());
    r.bytes.insert(r.bytes.end(), bytes.begin(), bytes.end());
  }
  return r;
}

/// The file's tensors for one module, by loom-relative name, and the differences found so far.
struct plan {
  struct source {
    std::string torch_name;       // for messages
    const stored_tensor* stored;  // in the file, or `combined`
    std::optional<stored_tensor> combined;
  };
  std::map<std::string, source, std::less<>> sources;  // by name relative to the prefixes
  std::vector<std::string> targets;                    // loom-relative names, in the store
  std::vector<std::string> explained;                  // absent for a reason already listed
  std::vector<std::string> differences;
};

template <class T>
plan make_plan(family f, const tensor_file& file, const param_store<T>& params, prefixes names,
               import_options options) {
  plan p;
  const std::string lp = with_dot(names.loom), tp = with_dot(names.torch);

  // The file's side: every tensor of the module; separate projections grouped per module.
  std::map<std::string, std::array<const stored_tensor*, 3>> separate;  // module prefix -> q, k, v
  for (const auto& [name, s] : file.tensors) {
    if (!name.starts_with(tp)) continue;
    const std::string relative = name.substr(tp.size());
    if (!torch_side_belongs(f, relative)) continue;
    if (auto sep = separate_projection(relative)) {
      separate[sep->first][static_cast<std::size_t>(sep->second)] = &s;
      continue;
    }
    p.sources[relative] = {name, &s, std::nullopt};
  }
  for (const auto& [module, qkv] : separate) {
    const std::string packed = module + "in_proj_weight";
    // (the lambda captures a copy of the name: clang 14, which builds the fuzz target, cannot
    // capture a structured binding)
    auto torch_name = [&, prefix = tp + module](int i) { return in_quotes(prefix + std::string(separate_names[i])); };
    if (p.sources.contains(packed)) {
      p.differences.push_back(in_quotes(tp + packed) + " and " + torch_name(0) +
                              ": the file has both the packed and the separate projections of one module");
      continue;
    }
    p.explained.push_back(packed);  // unless loaded below, a difference about it is listed already
    bool complete = true;
    for (int i = 0; i < 3; ++i)
      if (!qkv[static_cast<std::size_t>(i)]) {
        complete = false;
        p.differences.push_back("missing tensor " + torch_name(i) + " (the file has the other separate projections)");
      }
    if (!complete) continue;
    bool floats = true, square = true;
    std::string shapes;
    for (int i = 0; i < 3; ++i) {
      const stored_tensor& s = *qkv[static_cast<std::size_t>(i)];
      shapes += (i ? ", " : "") + torch_name(i) + " " + s.shape_str();
      if (!is_float(s)) {
        floats = false;
        p.differences.push_back(torch_name(i) + ": dtype " + std::string(storage_name(s.type)) +
                                " in the file, expected F32, F64, F16 or BF16");
      }
      square = square && s.shape.size() == 2 && s.shape[0] == s.shape[1] && s.shape == qkv[0]->shape;
    }
    if (!square)
      p.differences.push_back(shapes +
                              ": the separate-projection variant loads only when all three are [D, D] "
                              "(kdim = vdim = embed_dim); loom's attention projects queries, keys and values from "
                              "the model dim D, so a MultiheadAttention with kdim or vdim different from embed_dim "
                              "cannot be loaded");
    if (!floats || !square) continue;
    const stored_tensor* parts[3] = {qkv[0], qkv[1], qkv[2]};
    auto& src = p.sources[packed];
    src.torch_name = tp + module + "{q,k,v}_proj_weight";
    src.combined = concatenate_rows(parts);
    src.stored = &*src.combined;
  }

  if (p.sources.empty() && separate.empty()) {
    std::string some;
    int shown = 0;
    for (auto it = file.tensors.begin(); it != file.tensors.end() && shown < 3; ++it, ++shown)
      some += (shown ? ", " : "") + in_quotes(it->first);
    p.differences.push_back("the file has no " + std::string(family_name(f)) + " tensor under the prefix " +
                            in_quotes(tp) +
                            (some.empty() ? " (it is empty)" : " (its names begin: " + some + ", ...)"));
  }

  // The store's side: the parameters the module must fill.
  for (const auto& [name, e] : params)
    if (name.starts_with(lp) && belongs(f, std::string_view(name).substr(lp.size())))
      p.targets.push_back(name.substr(lp.size()));
  // an attention layer built without biases (mha_options{.bias = false}) has none in the store
  const bool store_bias_free = f == family::attention && !p.targets.empty() &&
                               std::none_of(p.targets.begin(), p.targets.end(), [](const std::string& t) { return is_bias(t); });
  if (f == family::attention) {
    for (std::string_view n : attention_names)
      if (std::find(p.targets.begin(), p.targets.end(), n) == p.targets.end() && !(store_bias_free && is_bias(n)))
        p.differences.push_back("the store has no parameter " + in_quotes(lp + std::string(n)) +
                                " (create the store from the graph with make_params before loading)");
    if (store_bias_free)
      for (const auto& [relative, src] : p.sources)
        if (is_bias(relative))
          p.differences.push_back(in_quotes(src.torch_name) + ": the file has biases, the loom layer under " +
                                  in_quotes(lp) + " has none (built with mha_options{.bias = false})");
  } else if (p.targets.empty()) {
    p.differences.push_back("the store has no parameter named " + in_quotes(lp + "encoder.*") + " or " +
                            in_quotes(lp + "decoder.*") +
                            " (create the store from the graph with make_params before loading)");
  }

  const bool bias_free =
      options.zero_absent_biases && !p.sources.empty() &&
      std::none_of(p.sources.begin(), p.sources.end(), [](const auto& s) { return is_bias(s.first); });
  for (const std::string& relative : p.targets) {
    const tensor<T>& value = params.value(lp + relative);
    auto it = p.sources.find(relative);
    if (it == p.sources.end()) {
      if (bias_free && is_bias(relative)) continue;  // loads as zeros
      if (std::find(p.explained.begin(), p.explained.end(), relative) == p.explained.end())
        p.differences.push_back("missing tensor " + in_quotes(tp + relative) + " (loom parameter " +
                                in_quotes(lp + relative) + ", shape " + value.dims().str() + ")");
      continue;
    }
    const stored_tensor& s = *it->second.stored;
    if (!is_float(s))
      p.differences.push_back(in_quotes(it->second.torch_name) + ": dtype " + std::string(storage_name(s.type)) +
                              " in the file, expected F32, F64, F16 or BF16");
    if (!std::equal(s.shape.begin(), s.shape.end(), value.shape().begin(), value.shape().end()))
      p.differences.push_back(in_quotes(it->second.torch_name) + ": shape " + s.shape_str() + " in the file, " +
                              value.dims().str() + " in the store (loom parameter " + in_quotes(lp + relative) + ")");
    else if (const std::int64_t bad = first_non_finite(s); bad >= 0 && !options.allow_non_finite)
      p.differences.push_back(non_finite_text(it->second.torch_name, s, bad) +
                              " (load with allow_non_finite = true to accept it)");
  }
  if (options.strict)
    for (const auto& [relative, src] : p.sources) {
      if (std::find(p.targets.begin(), p.targets.end(), relative) != p.targets.end()) continue;
      if (store_bias_free && is_bias(relative)) continue;  // listed above
      std::string line = "unexpected tensor " + in_quotes(src.torch_name) + " " + src.stored->shape_str() +
                         ": no loom parameter " + in_quotes(lp + relative);
      if (relative == "bias_k" || relative == "bias_v" || relative.ends_with(".bias_k") ||
          relative.ends_with(".bias_v"))
        line += " (add_bias_kv=True is not supported by loom's attention)";
      else
        line += " (load with strict = false to ignore it)";
      p.differences.push_back(line);
    }
  return p;
}

template <class T>
void load_module(family f, const tensor_file& file, param_store<T>& params, prefixes names, import_options options,
                 std::string_view function, std::string_view source) {
  plan p = make_plan(f, file, params, names, options);
  const std::string lp = with_dot(names.loom);
  if (!p.differences.empty()) {
    std::string what = std::string(function) + ": " + std::string(source) + " does not match the loom " +
                       std::string(family_name(f)) + " parameters under " + in_quotes(lp) + " (" +
                       std::to_string(p.differences.size()) +
                       (p.differences.size() == 1 ? " difference" : " differences") + "; nothing was loaded):";
    for (const auto& d : p.differences) what += "\n  - " + d;
    throw load_mismatch_error(what, std::move(p.differences));
  }
  // Convert everything first, so that a failure (out of memory) leaves the store as it was.
  std::vector<std::pair<std::string, tensor<T>>> values;
  for (const std::string& relative : p.targets) {
    auto it = p.sources.find(relative);
    if (it != p.sources.end())
      values.emplace_back(lp + relative, to_tensor<T>(*it->second.stored));
    else
      values.emplace_back(lp + relative, tensor<T>(params.value(lp + relative).dims()));  // a zero bias
  }
  for (auto& [name, value] : values) params.value(name) = std::move(value);
}

template <class T>
tensor_file export_module(family f, const param_store<T>& params, prefixes names, export_options options,
                          std::string_view function) {
  const std::string lp = with_dot(names.loom), tp = with_dot(names.torch);
  tensor_file file;
  file.metadata["format"] = "pt";
  std::vector<std::string> nonzero_biases;
  int found = 0;
  for (const auto& [name, e] : params) {
    if (!name.starts_with(lp)) continue;
    const std::string relative = name.substr(lp.size());
    if (!belongs(f, relative)) continue;
    ++found;
    if (!options.biases && is_bias(relative)) {
      if (std::any_of(e.value.values().begin(), e.value.values().end(), [](T v) { return v != T(0); }))
        nonzero_biases.push_back(in_quotes(name));
      continue;
    }
    const bool packed_weight = relative == "in_proj_weight" || relative.ends_with(".in_proj_weight");
    if (options.layout == attention_layout::separate && packed_weight) {
      const std::string module = relative.substr(0, relative.size() - std::string_view("in_proj_weight").size());
      const std::int64_t d = e.value.dim(1);
      for (int i = 0; i < 3; ++i) {
        tensor<T> part(dims_t{d, d});
        std::copy(e.value.data() + i * d * d, e.value.data() + (i + 1) * d * d, part.data());
        file.tensors[tp + module + std::string(separate_names[i])] = to_stored(part);
      }
    } else {
      file.tensors[tp + relative] = to_stored(e.value);
    }
  }
  if (f == family::attention) {
    const bool bias_free = !params.contains(lp + "in_proj_bias") && !params.contains(lp + "out_proj.bias");
    for (std::string_view n : attention_names)
      if (!params.contains(lp + std::string(n)) && !(bias_free && is_bias(n)))
        throw missing_error(std::string(function) + ": the store has no parameter " + in_quotes(lp + std::string(n)));
  } else if (found == 0) {
    throw missing_error(std::string(function) + ": the store has no parameter named " + in_quotes(lp + "encoder.*") +
                        " or " + in_quotes(lp + "decoder.*"));
  }
  if (!nonzero_biases.empty()) {
    std::string what = std::string(function) +
                       ": export without biases (a bias=False module) needs every bias to be "
                       "zero, but these are not:";
    for (const auto& n : nonzero_biases) what += " " + n;
    throw value_error(what);
  }
  return file;
}

}  // namespace

template <class T>
std::vector<std::string> multihead_attention_differences(const tensor_file& file, const param_store<T>& params,
                                                         prefixes names, import_options options) {
  return make_plan(family::attention, file, params, names, options).differences;
}

template <class T>
void load_multihead_attention(const tensor_file& file, param_store<T>& params, prefixes names, import_options options) {
  load_module(family::attention, file, params, names, options, "load_multihead_attention", "the tensor file");
}

template <class T>
void load_multihead_attention(const std::string& path, param_store<T>& params, prefixes names, import_options options) {
  const tensor_file file = read_safetensors(path);
  load_module(family::attention, file, params, names, options, "load_multihead_attention",
              "safetensors file " + in_quotes(path));
}

template <class T>
std::vector<std::string> transformer_differences(const tensor_file& file, const param_store<T>& params, prefixes names,
                                                 import_options options) {
  return make_plan(family::transformer, file, params, names, options).differences;
}

template <class T>
void load_transformer(const tensor_file& file, param_store<T>& params, prefixes names, import_options options) {
  load_module(family::transformer, file, params, names, options, "load_transformer", "the tensor file");
}

template <class T>
void load_transformer(const std::string& path, param_store<T>& params, prefixes names, import_options options) {
  const tensor_file file = read_safetensors(path);
  load_module(family::transformer, file, params, names, options, "load_transformer",
              "safetensors file " + in_quotes(path));
}

template <class T>
tensor_file export_multihead_attention(const param_store<T>& params, prefixes names, export_options options) {
  return export_module(family::attention, params, names, options, "export_multihead_attention");
}

template <class T>
tensor_file export_transformer(const param_store<T>& params, prefixes names, export_options options) {
  return export_module(family::transformer, params, names, options, "export_transformer");
}

#define LOOM_TORCH_IMPORT_INSTANTIATE(T)                                                                         \
  template std::vector<std::string> multihead_attention_differences(const tensor_file&, const param_store<T>&,   \
                                                                    prefixes, import_options);                   \
  template void load_multihead_attention(const tensor_file&, param_store<T>&, prefixes, import_options);         \
  template void load_multihead_attention(const std::string&, param_store<T>&, prefixes, import_options);         \
  template std::vector<std::string> transformer_differences(const tensor_file&, const param_store<T>&, prefixes, \
                                                            import_options);                                     \
  template void load_transformer(const tensor_file&, param_store<T>&, prefixes, import_options);                 \
  template void load_transformer(const std::string&, param_store<T>&, prefixes, import_options);                 \
  template tensor_file export_multihead_attention(const param_store<T>&, prefixes, export_options);              \
  template tensor_file export_transformer(const param_store<T>&, prefixes, export_options);
LOOM_TORCH_IMPORT_INSTANTIATE(float)
LOOM_TORCH_IMPORT_INSTANTIATE(double)
#undef LOOM_TORCH_IMPORT_INSTANTIATE

}  // namespace loom::pytorch
