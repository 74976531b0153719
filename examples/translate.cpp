// Train a tiny Transformer encoder–decoder from scratch to write numbers in English words
// ("4071" -> "four thousand seventy one"), then translate the held-out test split with greedy
// decoding and with beam search (width 4) through the KV cache, and report exact-match accuracy
// and corpus BLEU-4 of both.
//
//   translate [--minutes M] [--steps N] [--threads N] [--out DIR] [--seed S]
//
// Writes DIR/checkpoint.safetensors (parameters and optimizer state), DIR/loss.csv,
// DIR/loss.svg (the loss curve) and DIR/attention.svg (cross-attention of one example).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "loom/io/checkpoint.hpp"
#include "loom/train/progress.hpp"
#include "loom/train/trainer.hpp"
#include "translation.hpp"

using namespace loom;
using namespace translation;

namespace {

constexpr auto cfg = config<0.0>;
constexpr double label_smoothing = 0.1;

struct settings {
  double minutes = 5.0;
  long steps = 4000;
  int threads = 0;
  std::string out = "out/translate";
  std::uint64_t seed = 1;
  std::size_t batch = 64;
  long max_number = 999'999'999;
};

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (arg("--minutes")) s.minutes = std::stod(argv[++i]);
    else if (arg("--steps")) s.steps = std::stol(argv[++i]);
    else if (arg("--threads")) s.threads = std::stoi(argv[++i]);
    else if (arg("--out")) s.out = argv[++i];
    else if (arg("--seed")) s.seed = std::stoull(argv[++i]);
    else if (arg("--batch")) s.batch = std::stoul(argv[++i]);
    else if (arg("--max")) s.max_number = std::stol(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--minutes M] [--steps N] [--threads N] [--out DIR] [--seed S] [--batch B]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return s;
}

// Mean loss over the validation split (eval mode: no dropout).
template <class Graph>
double validation_loss(const task& t, const Graph& eval_loss, param_store<float>& params, int threads) {
  auto run = eval_loss.template executor<float>(params, {.threads = threads, .inference = true});
  double total = 0;
  std::int64_t tokens = 0;
  for (std::size_t b0 = 0; b0 < t.data.valid.size(); b0 += 250) {
    std::vector<std::size_t> idx;
    for (std::size_t i = b0; i < std::min(t.data.valid.size(), b0 + 250); ++i) idx.push_back(i);
    auto b = make_batch(t.data.valid, idx, t.source, t.target);
    run.forward({{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}});
    const auto n = label_tokens(b);
    total += run.output()[0] * static_cast<double>(n);
    tokens += n;
  }
  return total / static_cast<double>(tokens);
}

}  // namespace

int main(int argc, char** argv) {
  const settings s = parse(argc, argv);
  std::filesystem::create_directories(s.out);

  // ---- data: distinct numbers, no number in two splits
  task t(s.max_number, 60'000, 1'000, 2'000, s.seed);
  std::printf("numbers in [0, %ld]: %zu train, %zu validation, %zu test; vocabularies %d + %d tokens\n",
              s.max_number, t.data.train.size(), t.data.valid.size(), t.data.test.size(), t.source.size(),
              t.target.size());
  std::printf("e.g. \"%s\" -> \"%s\"\n", t.data.train[0].source.c_str(), t.data.train[0].target.c_str());

  // ---- the model: one definition, three graphs (training, evaluation, decoding)
  using train_model = nn::seq2seq<cfg, nn::train_mode>;
  using eval_model = nn::seq2seq<cfg, nn::eval_mode>;
  using decode_model = nn::seq2seq<cfg, nn::decode_mode>;
  auto train_graph = make_graph(train_model::loss<pad, label_smoothing>());
  auto eval_graph = make_graph(eval_model::loss<pad, label_smoothing>());
  auto memory_graph = std::apply([](auto... m) { return make_graph(m...); }, eval_model::cross_memory());
  auto step_graph = make_graph(decode_model::logits());
  auto params = train_graph.make_params<float>(s.seed);
  std::printf("model: %ld+%ld layers, d_model %ld, %ld heads, ffn %ld: %lld parameters, %d graph nodes\n",
              cfg.encoder_layers, cfg.decoder_layers, cfg.d_model, cfg.heads, cfg.ffn,
              static_cast<long long>(params.numel()), train_graph.size());

  // ---- training
  auto run = train_graph.executor<float>(params, {.threads = s.threads});
  adam<float> opt(params, {.lr = 1e-3});
  opt.set_schedule(warmup_cosine(1e-3, s.steps / 20, s.steps, 2e-5));
  trainer<float> trainer(run, params, opt,
                                {.total_steps = s.steps, .clip_norm = 1.0, .csv_path = s.out + "/loss.csv"});
  std::printf("training for %ld steps of %zu examples (at most %.1f minutes) on %d thread(s)\n", s.steps, s.batch,
              s.minutes, run.threads());
  for (long step = 1; step <= s.steps; ++step) {
    auto b = t.train_batch(step, s.batch, s.seed);
    trainer.step({{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}}, label_tokens(b));
    if (step % 500 == 0 || step == s.steps) trainer.validation(validation_loss(t, eval_graph, params, s.threads));
    if (trainer.seconds() > s.minutes * 60) {
      trainer.finish();
      std::printf("time limit reached after %ld steps\n", step);
      break;
    }
  }
  trainer.finish();
  const double train_seconds = trainer.seconds();
  std::printf("trained %lld steps in %.1f s (%.1f ms/step)\n", static_cast<long long>(trainer.steps()), train_seconds,
              1e3 * train_seconds / static_cast<double>(trainer.steps()));

  // ---- evaluation on the held-out test split: greedy decoding through the KV cache
  auto t0 = std::chrono::steady_clock::now();
  auto predictions = translate<cfg>(t, t.data.test, memory_graph, step_graph, params, s.threads);
  const double decode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> references;
  for (const auto& p : t.data.test) references.push_back(p.target);
  const double accuracy = exact_match(predictions, references);
  const auto bleu = corpus_bleu_text(predictions, references);
  std::printf("\ntest split (%zu numbers, greedy decoding with the KV cache in %.2f s):\n", references.size(),
              decode_seconds);
  std::printf("  exact match %.2f%%   BLEU-4 %.2f\n", 100 * accuracy, 100 * bleu.bleu);
  {  // beam search of width 4: the cache holds 4 rows per number and follows the hypotheses
    const auto b0 = std::chrono::steady_clock::now();
    const auto beam4 = translate_beam<cfg>(t, t.data.test, memory_graph, step_graph, params, s.threads, 4);
    const double beam_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - b0).count();
    std::printf("  beam 4 (%.2f s): exact match %.2f%%   BLEU-4 %.2f\n\n", beam_seconds, 100 * exact_match(beam4, references),
                100 * corpus_bleu_text(beam4, references).bleu);
  }
  for (std::size_t i = 0; i < 8 && i < predictions.size(); ++i)
    std::printf("  %-10s -> %-60s %s\n", t.data.test[i].source.c_str(), predictions[i].c_str(),
                predictions[i] == references[i] ? "ok" : ("(expected: " + references[i] + ")").c_str());
  int shown_errors = 0;
  for (std::size_t i = 8; i < predictions.size() && shown_errors < 5; ++i)
    if (predictions[i] != references[i]) {
      std::printf("  %-10s -> %-60s (expected: %s)\n", t.data.test[i].source.c_str(), predictions[i].c_str(),
                  references[i].c_str());
      ++shown_errors;
    }

  // ---- files: checkpoint, loss curve, cross-attention heat map of one long example
  const std::string checkpoint = s.out + "/checkpoint.safetensors";
  save_checkpoint(checkpoint, params, opt,
                  {{"example", "translate"}, {"seed", std::to_string(s.seed)}, {"test_exact_match", std::to_string(accuracy)}});
  write_loss_curve_svg(s.out + "/loss.svg", trainer.train_curve(), trainer.valid_curve(),
                       "translate: training and validation loss", {.log_y = true});
  {
    std::size_t pick = 0;
    for (std::size_t i = 0; i < t.data.test.size(); ++i)
      if (t.data.test[i].source.size() > t.data.test[pick].source.size()) pick = i;
    const auto& example = t.data.test[pick];
    auto words = t.target.encode(predictions[pick]);
    std::vector<std::int32_t> tgt{bos};
    tgt.insert(tgt.end(), words.begin(), words.end());
    auto src_ids = t.source.encode(example.source);
    tensor<std::int32_t> src(dims_t{1, static_cast<std::int64_t>(src_ids.size())},
                             std::vector<std::int32_t>(src_ids.begin(), src_ids.end()));
    tensor<std::int32_t> src_len(dims_t{1}, {static_cast<std::int32_t>(src_ids.size())});
    tensor<std::int32_t> tgt_t(dims_t{1, static_cast<std::int64_t>(tgt.size())}, tgt);
    auto graph = make_graph(eval_model::logits(), nn::seq2seq_cross_weights<cfg, cfg.decoder_layers - 1>());
    auto inspect = graph.executor<float>(params, {.inference = true});
    inspect.forward({{"src", src}, {"src_len", src_len}, {"tgt", tgt_t}});
    auto w = inspect.output(1);  // [1, H, T, S]
    const std::int64_t heads = w.dims[1], rows = w.dims[2], cols = w.dims[3];
    tensor<float> mean(dims_t{rows, cols});
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t e = 0; e < rows * cols; ++e) mean[e] += w[h * rows * cols + e] / static_cast<float>(heads);
    std::vector<std::string> row_labels, col_labels;
    for (int id : words) row_labels.push_back(t.target.token(id));
    row_labels.push_back("<eos>");
    for (char c : example.source) col_labels.emplace_back(1, c);
    write_heatmap_svg(s.out + "/attention.svg", mean, row_labels, col_labels,
                      "cross-attention (last layer, mean of heads): " + example.source);
  }
  std::printf("\nfiles written:\n  %s\n  %s/loss.csv\n  %s/loss.svg\n  %s/attention.svg\n", checkpoint.c_str(),
              s.out.c_str(), s.out.c_str(), s.out.c_str());
  std::printf("\nresult: %.2f%% exact match, BLEU-4 %.2f, %lld steps in %.0f s\n", 100 * accuracy, 100 * bleu.bleu,
              static_cast<long long>(trainer.steps()), train_seconds);
  return 0;
}
