// Checkpoint folders in the Hugging Face layout, generic over tensor names:
//
//   folder/config.json                       the model's configuration (a flat JSON object)
//   folder/model.safetensors                 every tensor, in one file, or
//   folder/model.safetensors.index.json      {"metadata": {"total_size": N}, "weight_map": {tensor: shard}}
//   folder/model-00001-of-00003.safetensors  and the shards it names
//
// Everything read is treated as hostile: bounded sizes, depth and counts, shard names that are
// plain file names in the folder, and an index that agrees exactly with its shards. Loading is
// all-or-nothing. Which HF tensor feeds which loom parameter (and whether it is stored
// transposed, as GPT-2's Conv1D weights [in, out] are) is the caller's mapping.
// docs/checkpoints.md describes the layout, the checks and the errors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/params.hpp"
#include "loom/io/safetensors.hpp"

namespace loom::hf {

/// The folder's file names.
inline constexpr std::string_view config_file = "config.json";
inline constexpr std::string_view single_file = "model.safetensors";
inline constexpr std::string_view index_file = "model.safetensors.index.json";

/// Limits on files from outside (beyond read_safetensors' own, which every shard gets).
/// config.json and the index are at most 64 MiB ...
inline constexpr std::uint64_t max_json_bytes = std::uint64_t{64} << 20;
/// ... nest at most 64 deep ...
inline constexpr std::size_t max_json_depth = 64;
/// ... have at most this many top-level (config) or metadata (index) fields ...
inline constexpr std::size_t max_json_fields = 100'000;
/// ... and an index names at most max_stored_tensors tensors in at most this many shards.
inline constexpr std::size_t max_shards = 100'000;

/// A field of config.json (or of an index's "metadata"): its JSON kind and its value as compact
/// JSON text: `4`, `1e-05`, `true`, `"silu"`, `null`, `["LlamaForCausalLM"]`, `{"factor":8.0}`.
/// Numbers keep the text of the file.
struct json_field {
  enum class kind { null, boolean, integer, number, string, array, object };
  kind type = kind::null;
  std::string text;
};

/// config.json, flat: its top-level fields by name (nested objects and arrays kept as text).
struct model_config {
  std::map<std::string, json_field, std::less<>> fields;

  bool contains(std::string_view name) const { return fields.find(name) != fields.end(); }
  /// The field's value. Each throws missing_error naming the field if absent, value_error
  /// naming it and its value if of another kind (number() takes integers too; integer() takes
  /// only integers within int64).
  std::int64_t integer(std::string_view name) const;
  double number(std::string_view name) const;
  bool boolean(std::string_view name) const;
  std::string string(std::string_view name) const;
};

/// Parses config.json's text; `source` starts error messages. Throws io_error naming the fault:
/// not JSON, not an object, a field given twice, nesting deeper than max_json_depth, more than
/// max_json_fields fields. Linear time, no recursion.
model_config parse_config(std::string_view text, std::string_view source = config_file);
/// Reads `folder`/config.json (at most max_json_bytes). Throws io_error.
model_config read_config(const std::string& folder);

/// The differences between a config and the values a model expects (field → JSON text, as in
/// json_field), one line each: `num_key_value_heads: file 4, model 2`, `rope_theta: not in
/// the file (model 10000.0)`. Numbers compare by value (4 equals 4.0, 1e-5 equals 1e-05),
/// everything else exactly. Throws value_error if an expected text is not JSON.
std::vector<std::string> config_differences(const model_config& file,
                                            const std::map<std::string, std::string>& expected);
/// Throws load_mismatch_error listing every difference, in one message, if there is any.
void check_config(const model_config& file, const std::map<std::string, std::string>& expected,
                  std::string_view source = config_file);

/// Where a folder's tensors are.
struct weight_index {
  /// Whether the folder is sharded (has an index file); else its one file is model.safetensors.
  bool sharded = false;
  /// The files holding tensors, in name order: the shards, or model.safetensors.
  std::vector<std::string> files;
  /// Tensor name → file name (sharded folders only: a single file lists its own tensors).
  std::map<std::string, std::string, std::less<>> weight_map;
  /// The index's "metadata" fields (HF writes "total_size").
  std::map<std::string, json_field, std::less<>> metadata;
};

/// Parses an index file's text. Throws io_error naming the fault: not JSON or not of the
/// shape {"metadata": {...}, "weight_map": {name: file}} (other top-level fields are
/// ignored), a name given twice, a file that is not a plain file name ending in
/// ".safetensors" (no '/', '\', NUL, "." or ".."), nesting deeper than max_json_depth, more
/// than max_stored_tensors tensors, max_shards files or max_json_fields metadata fields.
weight_index parse_index(std::string_view text, std::string_view source = index_file);
/// The index of a folder: parsed from its index file, or {files: {"model.safetensors"}}.
/// Throws io_error if the folder has neither file or both (an ambiguous folder).
weight_index read_index(const std::string& folder);

/// Every tensor of a folder (one file or all shards) in one tensor_file; its metadata is the
/// first file's. Throws io_error for a malformed file, an index that names a tensor its shard
/// lacks or a shard holding tensors the index does not name (listing them), or a tensor in
/// two shards.
tensor_file read_tensors(const std::string& folder);

/// How a stored tensor becomes a loom parameter.
enum class layout {
  same,        ///< as stored
  transposed,  ///< a 2-D tensor stored [a, b] is the parameter [b, a] (GPT-2's Conv1D [in, out])
};
/// Where a loom parameter comes from in the folder (or goes to, when saving).
struct tensor_source {
  std::string name;  ///< the Hugging Face tensor name, e.g. "model.layers.0.self_attn.q_proj.weight"
  layout transform = layout::same;
};
/// loom parameter name → its source. Several parameters may read one tensor (tied weights).
using name_map = std::map<std::string, tensor_source, std::less<>>;

/// Every parameter of the store under its own name, as stored.
template <class T>
name_map same_names(const param_store<T>& params);

/// Loads a folder into the store's parameters (already set: names and shapes) through
/// `names`, converting every floating dtype to T. Checks everything before changing anything:
/// the folder's integrity (as read_tensors) throws io_error; otherwise every difference --
/// a parameter without a mapping or a mapping to no parameter, a missing tensor, a shape
/// (after the transform) unlike the parameter's, a non-floating dtype, NaN or infinity unless
/// options.allow_non_finite, with options.strict a tensor no parameter reads -- is listed in
/// one load_mismatch_error (its message shows the first 50 and the count, its `differences`
/// the first 10,000). On error nothing changes.
/// Reads one file at a time: memory is the store's size once more plus the largest file.
template <class T>
void load(const std::string& folder, param_store<T>& params, const name_map& names, load_options options = {});

/// How save writes a folder.
struct save_options {
  /// The tensors' dtype: F32 or BF16 (F64 and F16 too), rounded to nearest even.
  storage_type dtype = storage_type::f32;
  /// 0: one file, model.safetensors. Else shards of at most this many bytes of tensor data
  /// (a larger tensor gets a shard of its own), named model-00001-of-0000N.safetensors, with
  /// the index; when everything fits in one shard, model.safetensors as with 0.
  std::uint64_t max_shard_bytes = 0;
  /// The safetensors metadata of every file ({"format": "pt"}: transformers requires it).
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
};

/// Writes the store as a folder: config.json (`config`: field → JSON text, written as one
/// object with sorted keys), each parameter under its mapped name (transposed back where the
/// mapping says so) in options.dtype, in one file or shards plus the index. Creates the
/// folder; removes the files of the other layout that a previous save left (model.safetensors,
/// the index, shards not written now). Each file is written atomically (temporary file, fsync,
/// rename); the folder as a whole is not: save to a new folder and rename it to replace one
/// atomically. Throws value_error (before writing) for a parameter missing from the mapping,
/// a mapping to no parameter, two parameters mapped to one name, a transform of a tensor that
/// is not 2-D, a config text that is not JSON, or a dtype that is not floating; io_error if
/// writing fails.
template <class T>
void save(const std::string& folder, const param_store<T>& params, const name_map& names,
          const std::map<std::string, std::string>& config, const save_options& options = {});

}  // namespace loom::hf
