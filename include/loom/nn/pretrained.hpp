// Decoder checkpoints in the layout they ship in: a Hugging Face folder (config.json plus
// model.safetensors, or shards with model.safetensors.index.json) read into, or written from, an
// nn::decoder_lm's parameters. The model's parameter names are the checkpoint's tensor names
// (see nn/decoder.hpp), so no tensor is renamed or transposed; what is checked is that the
// folder's config.json describes the model the program was compiled with.
#pragma once

#include <map>
#include <string>

#include "loom/core/params.hpp"
#include "loom/io/hf_checkpoint.hpp"
#include "loom/nn/decoder.hpp"

namespace loom::nn {

/// The config.json fields that describe a model of configuration `c`, as the family's Hugging
/// Face classes name them (field → JSON text): for llama hidden_size, intermediate_size,
/// num_attention_heads, num_key_value_heads, num_hidden_layers, vocab_size (when c.vocab > 0),
/// rms_norm_eps, rope_theta, tie_word_embeddings, hidden_act, model_type, and what loom's blocks
/// do not have at their defaults (head_dim = hidden_size / heads, rope_scaling null,
/// attention_bias and mlp_bias false); for gpt2 n_embd, n_inner, n_head, n_layer,
/// n_positions, vocab_size, layer_norm_epsilon, activation_function, model_type and
/// scale_attn_by_inverse_layer_idx false. save_pretrained writes these (and "architectures");
/// load_pretrained checks them, so that a checkpoint of a variant loom does not build (Llama
/// 3.1's scaled RoPE, Qwen2's q/k/v biases) is refused, naming the field.
std::map<std::string, std::string> hf_config_fields(const decoder_config& c);

/// The differences between a folder's config.json and the model `c`, one line each
/// (`num_key_value_heads: file 4, model 2`). A field the file leaves out takes the value the
/// family's Hugging Face config class gives it by default (num_key_value_heads: the heads,
/// rope_theta 10000, tie_word_embeddings false for llama and true for gpt2, n_inner null:
/// 4 · n_embd, ...); a required field that is missing is a difference. For llama the RoPE
/// layout is compared too, through loom's own field "rope_layout" (absent: "rotate_half", the
/// layout of every Hugging Face Llama checkpoint; save_pretrained writes "interleaved" for a
/// model of that layout), so a checkpoint is never loaded into a model that pairs its dims
/// differently.
std::vector<std::string> hf_config_differences(const hf::model_config& file, const decoder_config& c);

/// Loads a Hugging Face checkpoint folder into `params`, the store of an nn::decoder_lm<c, ...>
/// (made with make_params: its names and shapes are what is loaded). First config.json is
/// checked against `c` (load_mismatch_error listing every differing field, both values), then
/// the tensors as hf::load does: every parameter's tensor present, of its shape, finite, of a
/// floating dtype (F32, F64, F16 and BF16 convert to T), no tensor left over — else one
/// load_mismatch_error naming each. Nothing changes unless everything fits.
template <class T>
void load_pretrained(const std::string& folder, const decoder_config& c, param_store<T>& params,
                     load_options options = {});

/// Writes `params` as a Hugging Face checkpoint folder: config.json (hf_config_fields and the
/// family's "architectures") and the tensors under their own names in options.dtype (F32 or
/// BF16), in one file or shards (options.max_shard_bytes). The family's Hugging Face classes
/// and load_pretrained read it back.
template <class T>
void save_pretrained(const std::string& folder, const decoder_config& c, const param_store<T>& params,
                     const hf::save_options& options = {});

extern template void load_pretrained(const std::string&, const decoder_config&, param_store<float>&, load_options);
extern template void load_pretrained(const std::string&, const decoder_config&, param_store<double>&, load_options);
extern template void save_pretrained(const std::string&, const decoder_config&, const param_store<float>&,
                                     const hf::save_options&);
extern template void save_pretrained(const std::string&, const decoder_config&, const param_store<double>&,
                                     const hf::save_options&);

}  // namespace loom::nn
