// A character-level language model, decoder-only (nn::language_model), trained from scratch on
// verses this program writes itself from a small grammar (no download), printing samples as
// it learns; then it generates through the KV cache with temperature and top-k.
//
//   charlm [--minutes M] [--steps N] [--threads N] [--out DIR] [--seed S] [--temperature T] [--top-k K]
//
// The vocabulary is learnt from the text at run time (language_model with tgt_vocab = 0: its
// dim "V" is bound by the parameters' shapes). Writes DIR/loss.csv, DIR/loss.svg (the loss
// curve) and DIR/samples.txt.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "sampling.hpp"
#include "verse.hpp"
#include "loom/data/vocab.hpp"
#include "loom/data/windows.hpp"
#include "loom/loom.hpp"
#include "loom/nn/generate.hpp"
#include "loom/nn/kv_cache.hpp"
#include "loom/nn/transformer.hpp"
#include "loom/train/progress.hpp"
#include "loom/train/trainer.hpp"

using namespace loom;

namespace {

constexpr std::int64_t window = 64;  // the positions the model trains on (and should generate within)
constexpr nn::transformer_config cfg{.d_model = 64, .heads = 4, .ffn = 192, .decoder_layers = 2,
                                     .tgt_vocab = 0};  // 0: the vocabulary's size is bound at run time
using train_model = nn::language_model<cfg, nn::train_mode>;
using decode_model = nn::language_model<cfg, nn::decode_mode>;

using settings = examples::lm_settings;  // sampling.hpp

}  // namespace

int main(int argc, char** argv) {
  settings s;
  cli::command_line app("Trains a character-level language model on generated verse, then samples from it.", "charlm");
  app.options(s);
  app.parse(argc, argv);
  // the default too, before minutes of training
  if (const std::string problem = cli::writable_folder(s.out.value); !problem.empty()) app.fail("--out: " + problem);
  {
    std::ofstream record(s.out.value + "/settings.txt");
    for (const auto& [name, value] : reflect::to_map(s)) record << name << " = " << value << "\n";
  }
  try {

    // ---- data: one text, learnt character by character; the last tenth held out
    const std::string text = examples::grammar{}.text(4000, s.seed);
    const vocab chars = vocab::characters({text});
    const auto ids = chars.encode(text);
    const std::size_t cut = ids.size() * 9 / 10;
    const window_batcher train({ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut)}, window);
    const window_batcher valid({ids.begin() + static_cast<std::ptrdiff_t>(cut), ids.end()}, window);
    std::printf("text: %zu characters of generated verse (%d distinct tokens with the special ones), e.g.\n\n%s\n",
                text.size(), chars.size(), text.substr(0, text.find("\n\n") + 1).c_str());

    // ---- the model: its vocabulary size is the text's, given when the parameters are made
    auto train_graph = make_graph(train_model::loss());
    auto params = train_graph.make_params<float>(s.seed, {{"V", chars.size()}});
    auto step_graph = make_graph(decode_model::logits());
    std::printf("model: %ld layers, d_model %ld, %ld heads, window %lld: %lld parameters\n", cfg.decoder_layers,
                cfg.d_model, cfg.heads, static_cast<long long>(window), static_cast<long long>(params.numel()));

    auto run = train_graph.executor<float>(params, {.threads = s.threads});
    auto eval = train_graph.executor<float>(params, {.threads = s.threads, .inference = true});
    auto step = step_graph.executor<float>(params, {.threads = s.threads, .inference = true});
    auto cache = nn::kv_cache<float>::of<decode_model>(1, window);  // one sequence, the training window
    adam<float> opt(params, {.lr = 3e-3});
    opt.set_schedule(warmup_cosine(3e-3, s.steps / 20, s.steps, 1e-4));
    trainer<float> tr(run, params, opt, {.total_steps = s.steps, .clip_norm = 1.0, .csv_path = s.out.value + "/loss.csv"});
    auto validation_loss = [&] { return examples::validation_loss(eval, valid); };

    std::ofstream samples(s.out.value + "/samples.txt");
    std::printf("training for at most %ld steps or %.1f minutes on %d thread(s)\n", s.steps.value, s.minutes.value,
                run.threads());
    for (long n = 1; n <= s.steps; ++n) {
      auto batch = train.random(n, 16, s.seed);
      tr.step({{"tokens", batch.tokens}, {"target", batch.target}}, batch.tokens.size());
      const bool last = n == s.steps || tr.seconds() > s.minutes * 60;
      if (n % 500 == 0 || last) {
        tr.validation(validation_loss());
        const std::string text_now = examples::sample(step, cache, chars, "the ", static_cast<int>(window) - 4, 0.0, 0, 0);
        std::fprintf(stderr, "\n--- step %ld, greedy from \"the \":\n%s\n---\n", n, text_now.c_str());
        samples << "step " << n << " (greedy):\n" << text_now << "\n\n";
      }
      if (last) break;
    }
    tr.finish();
    std::printf("trained %lld steps in %.1f s (%.1f ms/step)\n", static_cast<long long>(tr.steps()), tr.seconds(),
                1e3 * tr.seconds() / static_cast<double>(tr.steps()));

    // ---- generation through the cache, sampled; within the training window (beyond it the
    // model meets positions it has never seen, and degrades)
    std::printf("\nsamples (temperature %.2f, top-k %d, %lld characters each):\n", s.temperature.value, s.top_k.value,
                static_cast<long long>(window));
    for (std::uint64_t k = 0; k < 4; ++k) {
      const std::string prompt = k % 2 ? "and the " : "the ";
      const std::string t = examples::sample(step, cache, chars, prompt, static_cast<int>(window - static_cast<std::int64_t>(prompt.size())),
                                   s.temperature, s.top_k, s.seed + k);
      std::printf("\n%s\n", t.c_str());
      samples << "sample " << k << " (temperature " << s.temperature.value << ", top-k " << s.top_k.value << "):\n"
              << t << "\n\n";
    }

    write_loss_curve_svg(s.out.value + "/loss.svg", tr.train_curve(), tr.valid_curve(), "charlm: training and validation loss",
                         {.log_y = true});
    const char* out = s.out.value.c_str();
    std::printf("\nfiles written:\n  %s/settings.txt\n  %s/loss.csv\n  %s/loss.svg\n  %s/samples.txt\n", out, out, out, out);
    std::printf("\nresult: validation loss %.3f nats/character after %lld steps in %.0f s\n",
                tr.valid_curve().empty() ? 0.0 : tr.valid_curve().back().second, static_cast<long long>(tr.steps()),
                tr.seconds());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "charlm: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
