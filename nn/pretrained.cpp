// Decoder checkpoints in the Hugging Face layout (include/loom/nn/pretrained.hpp).
#include "loom/nn/pretrained.hpp"

#include <array>
#include <charconv>
#include <string_view>

#include "loom/core/errors.hpp"
#include "../core/text.hpp"

namespace loom::nn {

namespace {

std::string number_text(double v) {
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  std::string s = ec == std::errc{} ? std::string(buf.data(), end) : std::string("0");
  // JSON has no "1e-05"-style problem, but a whole number must stay a number, not an integer
  // field: 10000 is written 10000.0, as Python's json writes floats
  if (s.find_first_of(".eE") == std::string::npos && s.find_first_of("ni") == std::string::npos) s += ".0";
  return s;
}


bool llama(const decoder_config& c) { return c.family == decoder_family::llama; }

long kv_heads(const decoder_config& c) { return c.kv_heads > 0 ? c.kv_heads : c.heads; }

// A field the file may leave out, and the value Hugging Face's config class then uses.
struct optional_field {
  std::string_view name;
  std::string text;
};

std::vector<optional_field> defaults(const hf::model_config& file, const decoder_config& c) {
  if (llama(c)) {
    std::vector<optional_field> d{{"rope_layout", "\"rotate_half\""},  // loom's field, see hf_config_differences
                                  {"rope_theta", "10000.0"},
                                  {"rope_scaling", "null"},
                                  {"attention_bias", "false"},
                                  {"mlp_bias", "false"},
                                  {"head_dim", std::to_string(c.d_model / c.heads)},
            {"tie_word_embeddings", "false"},
            {"rms_norm_eps", "1e-06"},
            {"hidden_act", "\"silu\""}};
    // without num_key_value_heads, every query head has its own (a missing num_attention_heads
    // is a difference of its own)
    if (auto it = file.fields.find("num_attention_heads"); it != file.fields.end())
      d.push_back({"num_key_value_heads", it->second.text});
    return d;
  }
  return {{"n_inner", "null"},
          {"scale_attn_by_inverse_layer_idx", "false"},
          {"layer_norm_epsilon", "1e-05"},
          {"activation_function", "\"gelu_new\""},
          {"tie_word_embeddings", "true"}};
}

}  // namespace

std::map<std::string, std::string> hf_config_fields(const decoder_config& c) {
  std::map<std::string, std::string> f;
  if (llama(c)) {
    f["model_type"] = in_quotes("llama");
    f["hidden_size"] = std::to_string(c.d_model);
    f["intermediate_size"] = std::to_string(c.ffn);
    f["num_attention_heads"] = std::to_string(c.heads);
    f["num_key_value_heads"] = std::to_string(kv_heads(c));
    f["num_hidden_layers"] = std::to_string(c.layers);
    f["rms_norm_eps"] = number_text(c.eps);
    f["rope_theta"] = number_text(c.rope_theta);
    f["tie_word_embeddings"] = c.tied_embeddings ? "true" : "false";
    f["hidden_act"] = in_quotes("silu");
    // what loom's llama blocks do not have: written as Hugging Face's defaults, refused otherwise
    f["head_dim"] = std::to_string(c.d_model / c.heads);
    f["rope_scaling"] = "null";
    f["attention_bias"] = "false";
    f["mlp_bias"] = "false";
  } else {
    f["model_type"] = in_quotes("gpt2");
    f["n_embd"] = std::to_string(c.d_model);
    f["n_inner"] = c.ffn == 4 * c.d_model ? "null" : std::to_string(c.ffn);
    f["n_head"] = std::to_string(c.heads);
    f["n_layer"] = std::to_string(c.layers);
    f["n_positions"] = std::to_string(c.max_positions);
    f["layer_norm_epsilon"] = number_text(c.eps);
    f["activation_function"] = in_quotes("gelu_new");
    f["scale_attn_by_inverse_layer_idx"] = "false";
  }
  if (c.vocab > 0) f["vocab_size"] = std::to_string(c.vocab);
  return f;
}

std::vector<std::string> hf_config_differences(const hf::model_config& file, const decoder_config& c) {
  hf::model_config filled = file;
  for (const optional_field& d : defaults(file, c)) {
    if (filled.contains(d.name)) continue;
    hf::json_field f;
    f.text = d.text;
    f.type = d.text == "null"                          ? hf::json_field::kind::null
             : d.text == "true" || d.text == "false"   ? hf::json_field::kind::boolean
             : d.text.front() == '"'                   ? hf::json_field::kind::string
             : d.text.find('.') != std::string::npos || d.text.find('e') != std::string::npos
                 ? hf::json_field::kind::number
                 : hf::json_field::kind::integer;
    filled.fields.emplace(std::string(d.name), f);
  }
  auto expected = hf_config_fields(c);
  // Hugging Face's Llama rotates halves; a checkpoint in the interleaved layout (Meta's original
  // pairing) says so with loom's own field "rope_layout" (save_pretrained writes it), so that
  // the two are never loaded into each other's model: the numbers would load and be wrong.
  if (llama(c)) expected["rope_layout"] = in_quotes(c.rope == rope_layout::interleaved ? "interleaved" : "rotate_half");
  // GPT-2's n_inner: null means 4 · n_embd, so a null and an explicit 4 · n_embd are one model
  if (!llama(c) && c.ffn == 4 * c.d_model) {
    auto it = filled.fields.find("n_inner");
    if (it != filled.fields.end() && it->second.type != hf::json_field::kind::null) expected["n_inner"] = std::to_string(c.ffn);
  }
  return hf::config_differences(filled, expected);
}

template <class T>
void load_pretrained(const std::string& folder, const decoder_config& c, param_store<T>& params, load_options options) {
  const hf::model_config file = hf::read_config(folder);
  const auto differ = hf_config_differences(file, c);
  if (!differ.empty()) {
    std::string what = folder + "/config.json does not describe this model:";
    for (const auto& d : differ) what += "\n  " + d;
    throw load_mismatch_error(what, differ);
  }
  hf::load(folder, params, hf::same_names(params), options);
}

template <class T>
void save_pretrained(const std::string& folder, const decoder_config& c, const param_store<T>& params,
                     const hf::save_options& options) {
  auto config = hf_config_fields(c);
  config["architectures"] = llama(c) ? "[\"LlamaForCausalLM\"]" : "[\"GPT2LMHeadModel\"]";
  if (!llama(c)) config["tie_word_embeddings"] = "true";
  if (llama(c) && c.rope == rope_layout::interleaved) config["rope_layout"] = in_quotes("interleaved");
  if (c.vocab == 0) {
    // the vocabulary is the embedding's rows
    const auto& table = params.value(llama(c) ? "model.embed_tokens.weight" : "transformer.wte.weight");
    config["vocab_size"] = std::to_string(table.dims()[0]);
  }
  hf::save(folder, params, hf::same_names(params), config, options);
}

template void load_pretrained(const std::string&, const decoder_config&, param_store<float>&, load_options);
template void load_pretrained(const std::string&, const decoder_config&, param_store<double>&, load_options);
template void save_pretrained(const std::string&, const decoder_config&, const param_store<float>&,
                              const hf::save_options&);
template void save_pretrained(const std::string&, const decoder_config&, const param_store<double>&,
                              const hf::save_options&);

}  // namespace loom::nn
