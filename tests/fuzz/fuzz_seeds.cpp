// Writes the fuzz target's seed corpus with loom's own writers: safetensors of the fuzz stores,
// checkpoints with optimizer state, PyTorch state_dicts exported packed and separate, a file of
// every dtype, and small edge cases. Run at build time (tests/fuzz/CMakeLists.txt), so that no
// binary blob is committed.
//
//   fuzz_seeds DIR [HF_DIR]   HF_DIR: JSON seeds of fuzz_hf (config.json and index files)
#include <cstdio>
#include <filesystem>
#include <string>

#include "fuzz_stores.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/hf_checkpoint.hpp"
#include "loom/io/safetensors.hpp"
#include "loom/io/torch_import.hpp"

using namespace loom;

namespace {

// The index and config of folders that hf::save writes (GPT-2-like names, one shard per
// tensor and two), a Llama-like config.json, and the index fuzz_hf's own shards match.
void write_hf_seeds(const std::string& dir, const param_store<float>& params) {
  std::filesystem::create_directories(dir);
  auto copy = [&](const std::string& from, const std::string& to) {
    std::filesystem::copy_file(from, dir + "/" + to, std::filesystem::copy_options::overwrite_existing);
  };
  const std::string folder = dir + "/folder.tmp";
  hf::save(folder, params, hf::same_names(params), {{"model_type", "\"gpt2\""}, {"n_embd", "2"}},
           {.max_shard_bytes = 1});
  copy(folder + "/model.safetensors.index.json", "index_per_tensor.json");
  copy(folder + "/config.json", "config_gpt2.json");
  std::filesystem::remove_all(folder);
  auto write = [&](const std::string& name, const std::string& text) {
    std::FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
    if (!f) return;
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  };
  write("config_llama.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false, "hidden_act": "silu",
    "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}, "bos_token_id": null, "torch_dtype": "bfloat16"})");
  write("index_fuzz_hf.json", R"({"metadata": {"total_size": 112}, "weight_map": {
    "transformer.h.0.attn.c_attn.bias": "model-00001-of-00002.safetensors",
    "transformer.h.0.attn.c_attn.weight": "model-00001-of-00002.safetensors",
    "transformer.wte.weight": "model-00002-of-00002.safetensors"}})");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR [HF_DIR]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::filesystem::create_directories(dir);
  auto at = [&](const char* name) { return dir + "/" + name + ".safetensors"; };
  const auto& s = fuzz::stores();

  save_safetensors(at("attention"), s.attention, {{"source", "fuzz_seeds"}});
  save_safetensors(at("transformer_loom_names"), s.transformer);
  save_safetensors(at("attention_double"), [&] {
    param_store<double> p;
    for (const auto& [name, e] : s.attention) p.set(name, tensor_cast<double>(e.value));
    return p;
  }());
  {
    param_store<float> p = s.checkpoint;
    adam<float> opt(p);
    save_checkpoint(at("checkpoint_step0"), p, opt, {{"epoch", "0"}});
    fuzz::step_once(p, opt);
    fuzz::step_once(p, opt);
    save_checkpoint(at("checkpoint_adam"), p, opt, {{"epoch", "2"}});
    sgd<float> momentum(p, 0.1, {.momentum = 0.9});
    fuzz::step_once(p, momentum);
    save_checkpoint(at("checkpoint_sgd"), p, momentum);
  }
  write_safetensors(at("torch_attention_packed"), pytorch::export_multihead_attention(s.attention, {.loom = "att"}));
  write_safetensors(at("torch_attention_separate"),
                    pytorch::export_multihead_attention(s.attention, {.loom = "att"},
                                                        {.layout = pytorch::attention_layout::separate}));
  write_safetensors(at("torch_transformer"), pytorch::export_transformer(s.transformer));
  {
    tensor_file f;
    f.tensors["f32"] = to_stored(tensor<float>({2, 2}, {1.5f, -2.0f, 0.0f, 3.25f}));
    f.tensors["f64"] = to_stored(tensor<double>({3}, {0.5, -1.0, 1e300}));
    f.tensors["i32"] = to_stored(tensor<std::int32_t>({2}, {-7, 2147483647}));
    f.tensors["i64"] = to_stored(tensor<std::int64_t>(dims_t{}, {-9000000000}));
    f.tensors["u8"] = to_stored(tensor<std::uint8_t>({3}, {0, 200, 255}));
    f.tensors["empty"] = to_stored(tensor<float>(dims_t{0, 4}));
    f.tensors["bf16"] = to_stored(tensor<float>({3}, {1.0f, -0.5f, 3e38f}), storage_type::bf16);
    f.tensors["f16"] = to_stored(tensor<float>({3}, {1.0f, -0.5f, 6e-8f}), storage_type::f16);
    f.metadata = {{"a", "1"}, {"b", "two"}};
    write_safetensors(at("every_dtype"), f);
  }
  write_safetensors(at("no_tensors"), tensor_file{});
  {
    tensor_file f;
    f.metadata["only"] = "metadata";
    write_safetensors(at("metadata_only"), f);
  }
  if (argc == 3) write_hf_seeds(argv[2], s.checkpoint);
  return 0;
}
