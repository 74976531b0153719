// Streaming generation through the KV cache with the translation model of examples/translate:
// each word is printed as it is produced, then tokens/s and the cache's memory. Greedy by
// default; --temperature T [--top-k K] [--seed S] samples instead (reproducibly for a seed).
//
//   generate [--checkpoint out/translate/checkpoint.safetensors] [--temperature T] [--top-k K]
//            [--seed S] [--threads N] [--train-steps N] [--int8] [number ...]
//
// --int8 decodes with the step's weights quantized to int8 per output channel
// (exec_options::weights = int8): a quarter of the weight bytes read per token.
//
// A bad value (say --temperature nan, --top-k -1, a corrupt or foreign --checkpoint) ends it
// with one line on stderr and exit status 2.
//
// Without a checkpoint (run examples/translate first to make one), it trains the model for
// --train-steps steps (default 1500, about a minute) before generating.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/train/trainer.hpp"
#include "translation.hpp"

using namespace loom;
using namespace translation;

namespace {
constexpr auto cfg = config<0.0>;
using eval_model = nn::seq2seq<cfg, nn::eval_mode>;
using decode_model = nn::seq2seq<cfg, nn::decode_mode>;
}  // namespace

int main(int argc, char** argv) try {
  std::string checkpoint = "out/translate/checkpoint.safetensors";
  double temperature = 0;
  int top_k = 0, threads = 0;
  long train_steps = 1500;
  std::uint64_t seed = 1;
  std::vector<std::string> numbers;
  bool checkpoint_given = false, int8 = false;
  cli::command_line app("Streams translations of numbers through the KV cache, greedy or sampled.", "generate");
  app.existing_file("--checkpoint", checkpoint, "parameters to load (without one, trains first)", &checkpoint_given)
      .number("--temperature", temperature, 0.0, 100.0, "sample from softmax(logits / T); 0: greedy")
      .whole("--top-k", top_k, 0, tgt_vocab, "sample among the K most likely tokens (0: all)")
      .whole("--seed", seed, 0, UINT64_MAX, "seed of the sampling")
      .whole("--threads", threads, 0, max_threads, "worker threads (0: all cores)")
      .whole("--train-steps", train_steps, 1, 10'000'000, "steps to train when there is no checkpoint")
      .flag("--int8", int8, "decode with the weights quantized to int8 per output channel")
      .positional("numbers", numbers, "numbers to translate (up to 9 digits each)", [](const std::string& n) {
        return !n.empty() && n.size() <= 9 && n.find_first_not_of("0123456789") == std::string::npos
                   ? std::string()
                   : "\"" + n + "\" is not a number of 1 to 9 digits";
      });
  app.parse(argc, argv);
  if (numbers.empty()) numbers = {"4071", "19", "700000", "123456789", "80808080"};

  const task t(999'999'999, 60'000, 10, 10, 1);
  auto step_graph = make_graph(decode_model::logits());
  auto memory_graph = std::apply([](auto... m) { return make_graph(m...); }, eval_model::cross_memory());
  auto train_graph = make_graph(nn::seq2seq<cfg, nn::train_mode>::loss<pad, 0.1>());
  auto params = train_graph.make_params<float>(1);

  if (checkpoint_given || std::filesystem::exists(checkpoint)) {
    std::map<std::string, std::string> recorded;
    try {
      recorded = load_checkpoint(checkpoint, params);
    } catch (const error& e) {  // corrupt, or another model's
      app.fail(std::string("--checkpoint: ") + e.what());
    }
    // a checkpoint that records its model's configuration (examples/translate writes it, by
    // field name) must have been trained with this one: say which field differs
    if (recorded.count("model.d_model")) {
      const auto differ = reflect::differences(cfg, recorded, checkpoint, "model.");
      if (!differ.empty()) app.fail("--checkpoint: another model's configuration: " + differ.front());
    }
    std::printf("loaded %s\n", checkpoint.c_str());
  } else {
    std::printf("no checkpoint at %s: training for %ld steps first (examples/translate trains the full model)\n",
                checkpoint.c_str(), train_steps);
    auto run = train_graph.executor<float>(params, {.threads = threads});
    adam<float> opt(params, {.lr = 1e-3});
    opt.set_schedule(warmup_cosine(1e-3, train_steps / 20, train_steps, 2e-5));
    trainer_options options;
    options.total_steps = train_steps;
    trainer<float> tr(run, params, opt, options);
    for (long s = 1; s <= train_steps; ++s) {
      auto b = t.train_batch(s, 64, 1);
      tr.step({{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}}, label_tokens(b));
    }
    tr.finish();
  }

  auto memory = memory_graph.executor<float>(params, {.threads = threads, .inference = true});
  auto step = step_graph.executor<float>(
      params, {.threads = threads, .inference = true, .weights = int8 ? weight_precision::int8 : weight_precision::f32});
  std::printf("%s decoding%s, %s\n\n", temperature > 0 ? "sampled" : "greedy", int8 ? " with int8 weights" : "",
              temperature > 0 ? ("temperature " + std::to_string(temperature) + ", top-k " + std::to_string(top_k) +
                                 ", seed " + std::to_string(seed))
                                    .c_str()
                              : "one token per step through the KV cache");
  long total_tokens = 0;
  double total_seconds = 0;
  for (const auto& number : numbers) {
    std::vector<translation_pair> one{{number, ""}};
    std::vector<std::size_t> idx{0};
    auto b = make_batch(one, idx, t.source, t.target);
    const auto extra = encode(memory, b);  // the encoder, once per source
    nn::kv_cache<float> cache(step, 1, 32);
    std::printf("  %-10s ->", number.c_str());
    std::fflush(stdout);
    auto options = decode_options(24);
    options.temperature = temperature;
    options.top_k = top_k;
    options.seed = seed;
    auto r = nn::generate(step, cache, {{bos}}, options, extra, [&](std::size_t, int token) {
      if (token != eos) std::printf(" %s", t.target.token(token).c_str());
      std::fflush(stdout);
    });
    const double seconds = r.prefill_seconds + r.decode_seconds;
    const long tokens = static_cast<long>(r.tokens[0].size());
    std::printf("   [%ld tokens, %.0f tokens/s, cache %.1f KiB for %lld of %lld positions]\n", tokens,
                static_cast<double>(tokens) / seconds, static_cast<double>(cache.bytes()) / 1024.0,
                static_cast<long long>(cache.length()), static_cast<long long>(cache.capacity()));
    total_tokens += tokens;
    total_seconds += seconds;
  }
  std::printf("\n%ld tokens in %.2f ms: %.0f tokens/s\n", total_tokens, total_seconds * 1e3,
              static_cast<double>(total_tokens) / total_seconds);
  return 0;
} catch (const std::exception& e) {  // a failure while running: one line, not an abort
  std::fprintf(stderr, "generate: error: %s\n", e.what());
  return 1;
}
