// The translation model out of loom: its encoder and its KV-cached decoding step written as ONNX
// models (loom::onnx), then, when node and onnxruntime-node are installed, run in ONNX Runtime:
// greedy decoding of a split through the exported step, compared with loom's translations.
// Used by examples/translate --export-onnx DIR (built when loom::onnx is).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "loom/io/safetensors.hpp"
#include "loom/onnx/export.hpp"
#include "translation.hpp"

namespace translation {

/// What export_onnx found: how many of the split's translations ONNX Runtime gave as loom did
/// (checked false when ONNX Runtime could not run).
struct onnx_check {
  bool checked = false;
  std::size_t identical = 0, total = 0;
  std::vector<std::string> translations;  // ONNX Runtime's, in the split's order
};

/// Writes `dir`/encoder.onnx (the graph of the decoder layers' cross-attention memory) and
/// `dir`/decoder_step.onnx (the decoding step: tokens, positions, source lengths, memory and
/// the self-attention caches as past/present pairs); then, when `node` runs and `ort_dir` holds
/// onnxruntime-node, decodes `pairs` greedily through them (scripts/onnx_run.js in `scripts`)
/// and compares with `loom_translations` (translate()'s, same order). With `external_data` the
/// step's weights go to decoder_step.onnx.data. The encoder's outputs in ONNX Runtime are left
/// in `dir`/memory.safetensors.
template <class MemoryGraph, class StepGraph>
onnx_check export_onnx(const std::string& dir, const task& t, const std::vector<translation_pair>& pairs,
                       const std::vector<std::string>& loom_translations, const MemoryGraph& memory_graph,
                       const StepGraph& step_graph, const param_store<float>& params,
                       const std::map<std::string, std::string>& metadata, const std::string& ort_dir,
                       const std::string& scripts, int max_new_tokens = 20, bool external_data = false) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const std::string encoder = dir + "/encoder.onnx", step = dir + "/decoder_step.onnx";
  onnx::save(memory_graph, params, encoder, {.graph_name = "encoder", .metadata = metadata});
  onnx::save(step_graph, params, step,
             {.graph_name = "decoder_step", .metadata = metadata, .external_data = external_data});

  onnx_check r;
  r.total = pairs.size();
  if (std::system("node --version > /dev/null 2>&1") != 0 ||
      !fs::exists(fs::path(ort_dir) / "node_modules" / "onnxruntime-node"))
    return r;

  // the split's sources, for the encoder (ids as int64, as ONNX takes them)
  std::vector<std::size_t> idx(pairs.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  const auto batch = make_batch(pairs, idx, t.source, t.target);
  tensor_file sources;
  sources.tensors["src"] = to_stored(tensor_cast<std::int64_t>(batch.src));
  sources.tensors["src_len"] = to_stored(tensor_cast<std::int64_t>(batch.src_len));
  const std::string sources_file = dir + "/sources.safetensors", memory_file = dir + "/memory.safetensors";
  write_safetensors(sources_file, sources);
  const std::string node = "node " + scripts + "/onnx_run.js " + ort_dir + " ";
  if (std::system((node + encoder + " " + sources_file + " " + memory_file).c_str()) != 0) return r;

  // greedy decoding through the exported step, from <bos>, with empty caches: its states are
  // the inputs with a named output of the same name (the self-attention caches)
  const auto plan = step_graph.plan();
  std::vector<std::string> names;
  for (int node : plan.named)
    if (plan.is_state(node)) names.emplace_back(plan.order[static_cast<std::size_t>(node)]->name);
  const std::string spec_file = dir + "/greedy.json", tokens_file = dir + "/greedy_tokens.safetensors";
  {
    std::ofstream spec(spec_file);
    spec << "{\"step\": \"" << step << "\", \"feeds\": [\"" << memory_file << "\", \"" << sources_file
         << "\"], \"tokens\": \"tgt\", \"positions\": \"positions\", \"logits\": \"output0\", \"states\": [";
    for (std::size_t k = 0; k < names.size(); ++k) spec << (k ? ", " : "") << '"' << names[k] << '"';
    spec << "], \"present_prefix\": \"present.\", \"empty_states\": {";
    for (std::size_t k = 0; k < names.size(); ++k) {
      const int in = plan.input_index(names[k]);
      const auto& d = plan.dims[static_cast<std::size_t>(in)];  // [B, H, P, d]: H and d fixed
      spec << (k ? ", " : "") << '"' << names[k] << "\": [" << pairs.size() << ", " << d[1].constant << ", 0, "
           << d[3].constant << "]";
    }
    spec << "}, \"start\": [";
    for (std::size_t b = 0; b < pairs.size(); ++b) spec << (b ? ", " : "") << bos;
    spec << "], \"end\": " << eos << ", \"max_new\": " << max_new_tokens << "}\n";
  }
  if (std::system((node + "--greedy " + spec_file + " " + tokens_file).c_str()) != 0) return r;
  const auto tokens = to_tensor<std::int64_t>(read_safetensors(tokens_file).tensors.at("tokens"));
  for (std::size_t b = 0; b < pairs.size(); ++b) {
    std::vector<int> ids;
    for (int k = 0; k < max_new_tokens; ++k)
      ids.push_back(static_cast<int>(tokens[static_cast<std::int64_t>(b) * max_new_tokens + k]));
    r.translations.push_back(t.target.decode(ids));
    r.identical += r.translations.back() == loom_translations[b];
  }
  r.checked = true;
  return r;
}

}  // namespace translation
