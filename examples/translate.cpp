// Train a tiny Transformer encoder–decoder from scratch to write numbers in English words
// ("4071" -> "four thousand seventy one"), then translate the held-out test split with greedy
// decoding through the KV cache, and report exact-match accuracy and corpus BLEU-4.
//
//   translate [--minutes M] [--steps N] [--threads N] [--out DIR] [--seed S] [--accumulate A]
//
// Writes DIR/checkpoint.safetensors (parameters and optimizer state), DIR/loss.csv,
// DIR/loss.svg (the loss curve) and DIR/attention.svg (cross-attention of one example).
//
// Data parallel over MPI (when loom::distributed was built): `mpirun -np 2 translate --threads 1`
// trains on 2 processes, each taking its share of every step's batch (docs/distributed.md); the
// progress line, the evaluation and the files come from rank 0. --accumulate A cuts each
// process's share into A micro-batches whose gradients are accumulated.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "loom/data/sharding.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/train/progress.hpp"
#include "loom/train/trainer.hpp"
#include "translation.hpp"
#ifdef LOOM_HAVE_DISTRIBUTED
#include "loom/distributed/data_parallel.hpp"
#endif

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
  std::int64_t accumulate = 1;  // micro-batches per process and step
};

#ifdef LOOM_HAVE_DISTRIBUTED
using world_t = distributed::communicator;
#else
struct world_t {  // this process alone
  int rank() const { return 0; }
  int size() const { return 1; }
};
#endif

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
    else if (arg("--accumulate")) s.accumulate = std::stol(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--minutes M] [--steps N] [--threads N] [--out DIR] [--seed S] [--batch B] "
                   "[--accumulate A]\n",
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

int train_and_evaluate(const settings& s, world_t* world);

int main(int argc, char** argv) {
  const settings s = parse(argc, argv);
#ifdef LOOM_HAVE_DISTRIBUTED
  if (distributed::launched_by_mpi())
    return distributed::run(argc, argv,
                            [&](distributed::communicator& world) { return train_and_evaluate(s, &world); });
#endif
  return train_and_evaluate(s, nullptr);
}

int train_and_evaluate(const settings& s, world_t* world) {
  const int rank = world ? world->rank() : 0, ranks = world ? world->size() : 1;
  if (rank != 0) std::freopen("/dev/null", "w", stdout);  // rank 0 speaks and writes the files
  if (rank == 0) std::filesystem::create_directories(s.out);

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
  trainer_options options{.total_steps = s.steps, .clip_norm = 1.0, .csv_path = s.out + "/loss.csv"};
  if (rank != 0) {
    options.csv_path.clear();
    options.progress.out = std::fopen("/dev/null", "w");
  }
  trainer<float> trainer(run, params, opt, options);
  const std::int64_t micro_batches = ranks * s.accumulate;  // per step, over all processes
#ifdef LOOM_HAVE_DISTRIBUTED
  std::unique_ptr<distributed::data_parallel<float>> dp;
  if (world) {  // the same settings on every rank, rank 0's initial parameters
    dp = std::make_unique<distributed::data_parallel<float>>(
        *world, run, params,
        distributed::data_parallel_options{.config = {{"seed", std::to_string(s.seed)},
                                                      {"batch", std::to_string(s.batch)},
                                                      {"steps", std::to_string(s.steps)},
                                                      {"accumulate", std::to_string(s.accumulate)},
                                                      {"max", std::to_string(s.max_number)}}});
    trainer.set_gradient_sync(dp.get());
  }
#endif
  std::printf("training for %ld steps of %zu examples (at most %.1f minutes) on %d process(es) x %d thread(s), "
              "%lld micro-batch(es) per step\n",
              s.steps, s.batch, s.minutes, ranks, run.threads(), static_cast<long long>(micro_batches));
  for (long step = 1; step <= s.steps; ++step) {
    // this process's micro-batches of the step's batch: the same batch for any process count
    std::vector<seq2seq_batch> mine;
    std::int64_t tokens = 0;
    for (const auto& idx : shard_batch(t.train_indices(step, s.batch, s.seed), micro_batches, rank, ranks)) {
      mine.push_back(make_batch(t.data.train, idx, t.source, t.target));
      tokens += label_tokens(mine.back());
    }
    std::vector<std::vector<feed>> feeds;
    for (const auto& b : mine)
      feeds.push_back({{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}});
    trainer.step(feeds, tokens);
    if (rank == 0 && (step % 500 == 0 || step == s.steps))
      trainer.validation(validation_loss(t, eval_graph, params, s.threads));
    bool out_of_time = trainer.seconds() > s.minutes * 60;
#ifdef LOOM_HAVE_DISTRIBUTED
    if (world) world->broadcast(std::span(&out_of_time, 1));  // rank 0 decides for everyone
#endif
    if (out_of_time) {
      trainer.finish();
      std::printf("time limit reached after %ld steps\n", step);
      break;
    }
  }
  trainer.finish();
  if (rank != 0) return 0;  // rank 0 evaluates and writes the files
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
  std::printf("  exact match %.2f%%   BLEU-4 %.2f\n\n", 100 * accuracy, 100 * bleu.bleu);
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
