// Train a tiny Transformer encoder–decoder from scratch to write numbers in English words
// ("4071" -> "four thousand seventy one"), then translate the held-out test split with greedy
// decoding and with beam search (width 4) through the KV cache, and report exact-match accuracy
// and corpus BLEU-4 of both.
//
//   translate [--minutes M] [--steps N] [--threads N] [--out DIR] [--seed S] [--batch B]
//             [--max N] [--checkpoint-every N] [--resume] [--stop-after N] [--accumulate A]
//             [--timeout SECONDS] [--shard-optimizer] [--test-numbers N]
//
// Writes DIR/checkpoint.safetensors (parameters and optimizer state, every --checkpoint-every
// steps and at the end), DIR/loss.csv, DIR/loss.svg (the loss curve) and DIR/attention.svg
// (cross-attention of one example). --resume continues from DIR/checkpoint.safetensors when
// there is one (same --seed, --batch, --max and --steps, and the same micro-batches per step),
// keeping loss.csv up to its step; --stop-after N ends training after step N as if interrupted.
//
// Data parallel over MPI (when loom::distributed was built): `mpirun -np 2 translate --threads 1`
// trains on 2 processes, each taking its share of every step's batch (docs/distributed.md); the
// progress line, the evaluation and the files come from rank 0. --accumulate A cuts each
// process's share into A micro-batches whose gradients are accumulated. The same micro-batches per
// step (processes × A) give the same bits: a run may resume on another number of processes, and
// its checkpoints equal, byte for byte, those of one process accumulating them all. --timeout:
// how long a process waits for another before it ends the job (default 30 s). --shard-optimizer:
// each process keeps and updates only its share of Adam's state (ZeRO stage 1), with the same
// bits and the same checkpoints. --test-numbers N evaluates on the first N numbers of the test
// split only (the tests that train for a few steps: an untrained model decodes every number to
// the longest output, three times).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.hpp"
#include "loom/data/sharding.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/train/progress.hpp"
#include "loom/train/trainer.hpp"
#include "translation.hpp"
#ifdef LOOM_HAVE_ONNX
#include "translation_onnx.hpp"
#endif
#ifdef LOOM_HAVE_DISTRIBUTED
#include "loom/distributed/data_parallel.hpp"
#include "loom/distributed/state.hpp"
#endif

using namespace loom;
using namespace translation;

namespace {

constexpr auto cfg = config<0.0>;
constexpr double label_smoothing = 0.1;

// What defines a training run: a resumed run, and every rank of a data-parallel one, must have
// the same. One declaration (reflected below) gives the options (--seed, ...), the checkpoint's
// metadata and the ranks' start-up check, each by the field's name.
struct run_settings {
  cli::setting<std::uint64_t, "seed of the data split, the initial weights and the batches", 0, UINT64_MAX> seed = 1;
  cli::setting<std::size_t, "examples per step", 1, 4096> batch = 64;
  cli::setting<long, "largest number in the data", 100'000, 999'999'999> max = 999'999'999;
  cli::setting<long, "training steps", 1, 100'000'000> steps = 4000;
};

struct settings {
  double minutes = 5.0;
  int threads = 0;
  std::string out = "out/translate";
  long checkpoint_every = 500;
  bool resume = false;
  long stop_after = 0;         // end training after this step, as if interrupted (0: never)
  std::int64_t accumulate = 1;  // micro-batches per process and step
  double timeout = 30;          // seconds a process waits for another (data parallel)
  bool shard_optimizer = false;  // each process keeps and updates its share of Adam's state
  std::string precision = "f32";  // of training's GEMM-like work: f32 or bf16
  std::string export_onnx;       // folder for the ONNX models (empty: none)
  std::string ort_dir = LOOM_ORT_DIR;  // onnxruntime-node, to check them
  std::size_t test_numbers = 0;  // evaluate on the first this many of the test split (0: all)
  run_settings run;
};

}  // namespace
BOOST_HANA_ADAPT_STRUCT(run_settings, seed, batch, max, steps);
namespace {

#ifdef LOOM_HAVE_DISTRIBUTED
using world_t = distributed::communicator;
#else
struct world_t {  // this process alone
  int rank() const { return 0; }
  int size() const { return 1; }
};
#endif

void add_options(cli::command_line& app, settings& s) {
  app.number("--minutes", s.minutes, 0.0, 1e6, "stop training after this many minutes")
      .whole("--threads", s.threads, 0, max_threads, "worker threads (0: all cores)")
      .folder("--out", s.out, "folder of the files written")
      .whole("--checkpoint-every", s.checkpoint_every, 0, 100'000'000,
             "save a checkpoint every N steps (0: only at the end)")
      .flag("--resume", s.resume, "continue from the checkpoint in --out, if there is one")
      .whole("--stop-after", s.stop_after, 0, 100'000'000,
             "end training after this step as if interrupted, saving the checkpoint (0: never)")
      .whole("--accumulate", s.accumulate, 1, 4096, "micro-batches per process and step (gradient accumulation)")
      .number("--timeout", s.timeout, 0.1, 1e6,
              "seconds a process waits for another (under mpirun) before it ends the job")
      .flag("--shard-optimizer", s.shard_optimizer,
            "under mpirun: each process keeps and updates only its share of Adam's state (the same bits)")
      .text("--precision", s.precision,
            "training's matmuls and linear layers: f32, or bf16 (operands in bf16, float accumulation; "
            "parameters, gradients and Adam stay float)")
      .folder("--export-onnx", s.export_onnx,
              "after training, write the encoder and the decoding step as ONNX models in this folder and "
              "check greedy decoding through them in ONNX Runtime (when node and onnxruntime-node are installed)")
      .text("--ort-dir", s.ort_dir, "folder whose node_modules holds onnxruntime-node (for --export-onnx)")
      .whole("--test-numbers", s.test_numbers, 0, 1'000'000,
             "evaluate on the first N numbers of the test split only (0: all of it)")
      .options(s.run);
}

// What a checkpoint was trained with, from the two reflected structs: the run's settings by
// their names ("seed", "batch", ...) and the model's configuration ("model.d_model", ...). A
// resumed run must have the same.
// The micro-batches of a step (processes × --accumulate) are recorded, not --accumulate: the
// same micro-batches give the same bits on any number of processes, so a run may resume on
// another, and its checkpoints are byte for byte those of the same run on one process.
std::map<std::string, std::string> run_metadata(const settings& s, std::int64_t micro_batches) {
  auto m = reflect::to_map(s.run);
  m.merge(reflect::to_map(cfg, "model."));
  m["example"] = "translate";
  m["micro_batches"] = std::to_string(micro_batches);
  return m;
}

// A problem with the command line found once the processes run: every rank finds it, rank 0
// says it, and all end with status 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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

int train_and_evaluate(const settings& s, const cli::command_line& app, world_t* world);

int main(int argc, char** argv) {
  settings s;
  cli::command_line app("Trains a Transformer to write numbers in words, then evaluates it.", "translate");
  add_options(app, s);
  app.parse(argc, argv);
  // the default too, before minutes of training
  if (const std::string problem = cli::writable_folder(s.out); !problem.empty()) app.fail("--out: " + problem);
#ifdef LOOM_HAVE_DISTRIBUTED
  if (distributed::launched_by_mpi())
    return distributed::run(argc, argv,
                            [&](distributed::communicator& world) { return train_and_evaluate(s, app, &world); });
#endif
  return train_and_evaluate(s, app, nullptr);
}

int train_and_evaluate(const settings& s, const cli::command_line& app, world_t* world) {
  const int rank = world ? world->rank() : 0, ranks = world ? world->size() : 1;
  if (rank != 0) std::freopen("/dev/null", "w", stdout);  // rank 0 speaks and writes the files
  const std::int64_t micro_batches = ranks * s.accumulate;  // per step, over all processes
  try {
    if (s.precision != "f32" && s.precision != "bf16")
      throw usage_error("--precision " + s.precision + ": expected f32 or bf16");
    if (s.run.batch % static_cast<std::size_t>(micro_batches) != 0)
      throw usage_error("--batch " + std::to_string(s.run.batch.value) + " cannot be cut into " +
                        std::to_string(micro_batches) + " micro-batches (" + std::to_string(ranks) +
                        " process(es) x --accumulate " + std::to_string(s.accumulate) +
                        "): choose --batch and --accumulate so that they divide it");
#ifdef LOOM_HAVE_DISTRIBUTED
    if (world) world->set_timeout(s.timeout);
#endif
    // ---- data: distinct numbers, no number in two splits
    task t(s.run.max, 60'000, 1'000, 2'000, s.run.seed);
    std::printf("numbers in [0, %ld]: %zu train, %zu validation, %zu test; vocabularies %d + %d tokens\n",
                s.run.max.value, t.data.train.size(), t.data.valid.size(), t.data.test.size(), t.source.size(),
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
    auto params = train_graph.make_params<float>(s.run.seed);
    std::printf("model: %ld+%ld layers, d_model %ld, %ld heads, ffn %ld: %lld parameters, %d graph nodes\n",
                cfg.encoder_layers, cfg.decoder_layers, cfg.d_model, cfg.heads, cfg.ffn,
                static_cast<long long>(params.numel()), train_graph.size());

    // ---- training, resumed from the last checkpoint with --resume
    auto run = train_graph.executor<float>(
        params, {.threads = s.threads,
                 .precision = s.precision == "bf16" ? compute_precision::bf16 : compute_precision::f32});
    adam<float> opt(params, {.lr = 1e-3});
    opt.set_schedule(warmup_cosine(1e-3, s.run.steps / 20, s.run.steps, 2e-5));
    const std::string checkpoint = s.out + "/checkpoint.safetensors";
    const auto metadata = run_metadata(s, micro_batches);
    bool resuming = s.resume && rank == 0 && std::filesystem::exists(checkpoint);  // rank 0 reads it
#ifdef LOOM_HAVE_DISTRIBUTED
    if (world) world->broadcast(std::span(&resuming, 1));
#endif
    if (resuming) {
      std::map<std::string, std::string> saved;
      try {
#ifdef LOOM_HAVE_DISTRIBUTED
        saved = world ? distributed::load_checkpoint(*world, checkpoint, params, opt)
                      : load_checkpoint(checkpoint, params, opt);
#else
        saved = load_checkpoint(checkpoint, params, opt);
#endif
      } catch (const error& e) {
        throw usage_error(std::string("--resume: ") + e.what());
      }
      for (const auto& [key, value] : metadata) {
        if (saved[key] == value) continue;
        const std::string was = saved[key].empty() ? "(none)" : saved[key];
        if (key == "micro_batches")
          throw usage_error("--resume: " + checkpoint + " was trained with " + was +
                            " micro-batches per step, this run has " + value + " (" + std::to_string(ranks) +
                            " process(es) x --accumulate " + std::to_string(s.accumulate) +
                            "): choose processes and --accumulate whose product is " + was +
                            ", or start afresh without --resume");
        throw usage_error("--resume: " + checkpoint + " was trained with " + key + " " + was + ", this run has " +
                          value + ": resume with the same settings, or without --resume to start afresh");
      }
      std::printf("resumed from %s at step %lld\n", checkpoint.c_str(), static_cast<long long>(opt.steps()));
    }
    const std::int64_t first_step = opt.steps();
    trainer_options options{.total_steps = s.run.steps, .clip_norm = 1.0, .csv_path = s.out + "/loss.csv",
                            .resume_log = first_step > 0};
    if (rank != 0) {
      options.csv_path.clear();
      options.progress.out = std::fopen("/dev/null", "w");
    }
    trainer<float> trainer(run, params, opt, options);
#ifdef LOOM_HAVE_DISTRIBUTED
    std::unique_ptr<distributed::data_parallel<float>> dp;
    if (world) {  // the same settings on every rank, rank 0's initial parameters
      dp = std::make_unique<distributed::data_parallel<float>>(
          *world, run, params, distributed::data_parallel_options{.config = metadata});
      trainer.set_gradient_sync(dp.get());
      if (s.shard_optimizer) dp->shard_optimizer(opt);
    }
#endif
    // saved from every rank together when distributed (rank 0 writes)
    auto save = [&](const std::map<std::string, std::string>& meta) {
#ifdef LOOM_HAVE_DISTRIBUTED
      if (world) return distributed::save_checkpoint(*world, checkpoint, params, opt, meta);
#endif
      save_checkpoint(checkpoint, params, opt, meta);
    };
    std::printf("training for %ld steps of %zu examples (at most %.1f minutes) on %d process(es) x %d thread(s), "
                "%lld micro-batch(es) per step\n",
                s.run.steps - static_cast<long>(first_step), s.run.batch.value, s.minutes, ranks, run.threads(),
                static_cast<long long>(micro_batches));
    for (long step = static_cast<long>(first_step) + 1; step <= s.run.steps; ++step) {
      // this process's micro-batches of the step's batch: the same batch for any process count
      std::vector<seq2seq_batch> mine;
      std::int64_t tokens = 0;
      for (const auto& idx : shard_batch(t.train_indices(step, s.run.batch, s.run.seed), micro_batches, rank, ranks)) {
        mine.push_back(make_batch(t.data.train, idx, t.source, t.target));
        tokens += label_tokens(mine.back());
      }
      std::vector<std::vector<feed>> feeds;
      for (const auto& b : mine)
        feeds.push_back({{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}});
      trainer.step(feeds, tokens);
      if (rank == 0 && (step % 500 == 0 || step == s.run.steps))
        trainer.validation(validation_loss(t, eval_graph, params, s.threads));
      // the log is written before the checkpoint, so a resumed run finds every row it keeps
      if (s.checkpoint_every > 0 && step % s.checkpoint_every == 0 && step != s.run.steps) save(metadata);
      bool out_of_time = trainer.seconds() > s.minutes * 60 || step == s.stop_after;
#ifdef LOOM_HAVE_DISTRIBUTED
      if (world) world->broadcast(std::span(&out_of_time, 1));  // rank 0 decides for everyone
#endif
      if (out_of_time) {
        trainer.finish();
        std::printf(step == s.stop_after ? "stopped after step %ld (--stop-after)\n" : "time limit reached after %ld steps\n",
                    step);
        break;
      }
    }
    trainer.finish();
#ifdef LOOM_HAVE_DISTRIBUTED
    if (dp && s.shard_optimizer) distributed::gather_optimizer(*world, opt);  // for the final checkpoint
#endif
    if (rank != 0) return 0;  // rank 0 evaluates and writes the files
    const double train_seconds = trainer.seconds();
    const auto trained = static_cast<long long>(trainer.steps() - first_step);
    std::printf("trained %lld steps in %.1f s (%.1f ms/step)\n", trained, train_seconds,
                trained > 0 ? 1e3 * train_seconds / static_cast<double>(trained) : 0.0);

    // ---- evaluation on the held-out test split (or its first --test-numbers): greedy decoding
    // through the KV cache
    const std::vector<translation_pair> test(
        t.data.test.begin(),
        t.data.test.begin() + static_cast<std::ptrdiff_t>(s.test_numbers == 0 ? t.data.test.size()
                                                                               : std::min(s.test_numbers, t.data.test.size())));
    auto t0 = std::chrono::steady_clock::now();
    auto predictions = translate<cfg>(t, test, memory_graph, step_graph, params, s.threads);
    const double decode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<std::string> references;
    for (const auto& p : test) references.push_back(p.target);
    const double accuracy = exact_match(predictions, references);
    const auto bleu = corpus_bleu_text(predictions, references);
    std::printf("\ntest split (%zu numbers, greedy decoding with the KV cache in %.2f s):\n", references.size(),
                decode_seconds);
    std::printf("  exact match %.2f%%   BLEU-4 %.2f\n", 100 * accuracy, 100 * bleu.bleu);
    {  // beam search of width 4: the cache holds 4 rows per number and follows the hypotheses
      const auto b0 = std::chrono::steady_clock::now();
      const auto beam4 = translate_beam<cfg>(t, test, memory_graph, step_graph, params, s.threads, 4);
      const double beam_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - b0).count();
      std::printf("  beam 4 (%.2f s): exact match %.2f%%   BLEU-4 %.2f\n\n", beam_seconds,
                  100 * exact_match(beam4, references), 100 * corpus_bleu_text(beam4, references).bleu);
    }
    {  // the decoding step again with its weights in int8 (exec_options::weights): how many
       // translations stay the same, and the time
      const auto q0 = std::chrono::steady_clock::now();
      const auto int8 = translate<cfg>(t, test, memory_graph, step_graph, params, s.threads, weight_precision::int8);
      const double int8_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - q0).count();
      std::size_t same = 0;
      for (std::size_t i = 0; i < int8.size(); ++i) same += int8[i] == predictions[i];
      std::printf("  int8 weights (%.2f s): %zu of %zu greedy translations identical to float32's (%.2f%%), "
                  "exact match %.2f%%   BLEU-4 %.2f\n\n",
                  int8_seconds, same, int8.size(), 100.0 * static_cast<double>(same) / static_cast<double>(int8.size()),
                  100 * exact_match(int8, references), 100 * corpus_bleu_text(int8, references).bleu);
    }
    for (std::size_t i = 0; i < 8 && i < predictions.size(); ++i)
      std::printf("  %-10s -> %-60s %s\n", test[i].source.c_str(), predictions[i].c_str(),
                  predictions[i] == references[i] ? "ok" : ("(expected: " + references[i] + ")").c_str());
    int shown_errors = 0;
    for (std::size_t i = 8; i < predictions.size() && shown_errors < 5; ++i)
      if (predictions[i] != references[i]) {
        std::printf("  %-10s -> %-60s (expected: %s)\n", test[i].source.c_str(), predictions[i].c_str(),
                    references[i].c_str());
        ++shown_errors;
      }

    if (!s.export_onnx.empty()) {  // ---- the model out of loom, checked in ONNX Runtime
#ifdef LOOM_HAVE_ONNX
      const auto check = export_onnx(s.export_onnx, t, test, predictions, memory_graph, step_graph, params,
                                     run_metadata(s, micro_batches), s.ort_dir, LOOM_SCRIPTS_DIR);
      std::printf("ONNX models written: %s/encoder.onnx, %s/decoder_step.onnx\n", s.export_onnx.c_str(),
                  s.export_onnx.c_str());
      if (check.checked)
        std::printf("  ONNX Runtime, greedy through the exported step: %zu of %zu translations identical to loom's "
                    "(%.2f%%), exact match %.2f%%, BLEU-4 %.2f\n\n",
                    check.identical, check.total, 100.0 * static_cast<double>(check.identical) /
                                                       static_cast<double>(std::max<std::size_t>(check.total, 1)),
                    100 * exact_match(check.translations, references),
                    100 * corpus_bleu_text(check.translations, references).bleu);
      else
        std::printf("  not run in ONNX Runtime: node or onnxruntime-node (in %s) is missing (scripts/setup "
                    "installs both)\n\n",
                    s.ort_dir.c_str());
#else
      throw std::runtime_error("--export-onnx: this translate was built without loom::onnx (install libonnx-dev)");
#endif
    }

    // ---- files: checkpoint, loss curve, cross-attention heat map of one long example
    auto final_metadata = metadata;
    final_metadata["test_exact_match"] = std::to_string(accuracy);
    save_checkpoint(checkpoint, params, opt, final_metadata);
    write_loss_curve_svg(s.out + "/loss.svg", trainer.train_curve(), trainer.valid_curve(),
                         "translate: training and validation loss", {.log_y = true});
    {
      std::size_t pick = 0;
      for (std::size_t i = 0; i < test.size(); ++i)
        if (test[i].source.size() > test[pick].source.size()) pick = i;
      const auto& example = test[pick];
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
                trained, train_seconds);
  } catch (const usage_error& e) {
    if (rank == 0) app.report(e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "translate: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
