// A Llama-style decoder (nn::decoder_lm: grouped-query attention, rotary positions, SwiGLU,
// RMSNorm, no biases, tied embeddings) trained from scratch on the character-level verse of
// charlm, saved as a Hugging Face checkpoint folder (config.json + model.safetensors, the
// tensor names of Hugging Face's Llama), loaded back into a fresh store, and sampled through the
// KV cache.
//
//   llama [--minutes M] [--steps N] [--threads N] [--out DIR] [--seed S] [--temperature T] [--top-k K]
//
// Writes DIR/settings.txt, DIR/loss.csv, DIR/samples.txt, the checkpoint folder DIR/checkpoint
// and DIR/check.safetensors (a batch of tokens and the reloaded model's logits for it, which
// scripts/decoder_reference.py compares with its PyTorch reference run on the folder).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "llama_config.hpp"
#include "loom/data/vocab.hpp"
#include "loom/data/windows.hpp"
#include "loom/loom.hpp"
#include "loom/nn/decoder.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/kv_cache.hpp"
#include "loom/nn/pretrained.hpp"
#include "loom/train/trainer.hpp"
#include "sampling.hpp"
#include "verse.hpp"

using namespace loom;

namespace {

constexpr std::int64_t window = examples::llama_window;
constexpr nn::decoder_config cfg = examples::llama_config;
using train_model = nn::decoder_lm<cfg, nn::train_mode>;
using eval_model = nn::decoder_lm<cfg, nn::eval_mode>;
using decode_model = nn::decoder_lm<cfg, nn::decode_mode>;

using settings = examples::lm_settings;  // sampling.hpp

}  // namespace

int main(int argc, char** argv) {
  settings s;
  s.steps = 3000;
  s.out = std::string("out/llama");
  cli::command_line app("Trains a Llama-style decoder on generated verse, saves it as a Hugging Face checkpoint, "
                        "reloads it and samples from it.",
                        "llama");
  app.options(s);
  app.parse(argc, argv);
  if (const std::string problem = cli::writable_folder(s.out.value); !problem.empty()) app.fail("--out: " + problem);
  const std::string out = s.out.value;
  {
    std::ofstream record(out + "/settings.txt");
    for (const auto& [name, value] : reflect::to_map(s)) record << name << " = " << value << "\n";
  }
  try {
    // ---- data: charlm's verse, character by character; the last tenth held out
    const std::string text = examples::grammar{}.text(4000, s.seed);
    const vocab chars = vocab::characters({text});
    const auto ids = chars.encode(text);
    const std::size_t cut = ids.size() * 9 / 10;
    const window_batcher train({ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut)}, window);
    const window_batcher valid({ids.begin() + static_cast<std::ptrdiff_t>(cut), ids.end()}, window);

    auto train_graph = make_graph(train_model::loss());
    auto params = train_graph.make_params<float>(s.seed, {{"V", chars.size()}});
    std::printf("model: Llama-style, %ld layers, d_model %ld, %ld query heads sharing %ld key/value heads, SwiGLU %ld, "
                "tied embeddings: %lld parameters\n",
                cfg.layers, cfg.d_model, cfg.heads, cfg.kv_heads, cfg.ffn, static_cast<long long>(params.numel()));

    auto run = train_graph.executor<float>(params, {.threads = s.threads});
    auto eval = train_graph.executor<float>(params, {.threads = s.threads, .inference = true});
    adam<float> opt(params, {.lr = 3e-3});
    opt.set_schedule(warmup_cosine(3e-3, s.steps / 20, s.steps, 1e-4));
    trainer<float> tr(run, params, opt, {.total_steps = s.steps, .clip_norm = 1.0, .csv_path = out + "/loss.csv"});
    auto validation_loss = [&] { return examples::validation_loss(eval, valid); };
    const double initial = validation_loss();
    std::printf("validation loss before training: %.3f nats/character\n", initial);
    for (long n = 1; n <= s.steps; ++n) {
      auto batch = train.random(n, 16, s.seed);
      tr.step({{"tokens", batch.tokens}, {"target", batch.target}}, batch.tokens.size());
      const bool last = n == s.steps || tr.seconds() > s.minutes * 60;
      if (n % 500 == 0 || last) tr.validation(validation_loss());
      if (last) break;
    }
    tr.finish();
    const double trained = tr.valid_curve().back().second;
    std::printf("trained %lld steps in %.1f s: validation loss %.3f -> %.3f nats/character\n",
                static_cast<long long>(tr.steps()), tr.seconds(), initial, trained);

    // ---- save as a Hugging Face checkpoint folder, then load it into a fresh store
    const std::string folder = out + "/checkpoint";
    nn::save_pretrained(folder, cfg, params);
    auto reloaded = train_graph.make_params<float>(s.seed + 1, {{"V", chars.size()}});  // other values
    nn::load_pretrained(folder, cfg, reloaded);
    for (const auto& name : params.names())
      if (std::memcmp(params.value(name).data(), reloaded.value(name).data(),
                      sizeof(float) * static_cast<std::size_t>(params.value(name).size())) != 0)
        throw error("the reloaded parameter " + name + " differs from the saved one");
    std::printf("saved %s (config.json + model.safetensors) and loaded it back: every tensor equal\n", folder.c_str());

    // the reloaded model's logits for one validation batch, for the PyTorch reference to check
    auto logits_graph = make_graph(eval_model::logits());
    auto check = logits_graph.executor<float>(reloaded, {.threads = s.threads});
    const auto batch = valid.consecutive(0, 2);
    check.forward({{"tokens", batch.tokens}});
    tensor_file check_file;
    check_file.tensors["tokens"] = to_stored(batch.tokens);
    check_file.tensors["logits"] = to_stored(tensor<float>(check.output()));
    write_safetensors(out + "/check.safetensors", check_file);

    // ---- generation through the KV cache with the reloaded parameters
    auto step = make_graph(decode_model::logits()).executor<float>(reloaded, {.threads = s.threads, .inference = true});
    auto cache = nn::kv_cache<float>::of<decode_model>(1, window);
    std::ofstream samples(out + "/samples.txt");
    std::printf("\nsamples from the reloaded model (temperature %.2f, top-k %d):\n", s.temperature.value,
                s.top_k.value);
    for (std::uint64_t k = 0; k < 3; ++k) {
      const std::string prompt = k % 2 ? "and the " : "the ";
      const std::string t = examples::sample(step, cache, chars, prompt, static_cast<int>(window) - static_cast<int>(prompt.size()),
                                   s.temperature, s.top_k, s.seed + k);
      std::printf("\n%s\n", t.c_str());
      samples << t << "\n\n";
    }
    std::printf("\nresult: validation loss %.3f -> %.3f nats/character in %.0f s; checkpoint %s\n", initial, trained,
                tr.seconds(), folder.c_str());
    return trained < initial ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llama: error: %s\n", e.what());
    return 1;
  }
}
