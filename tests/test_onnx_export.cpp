// loom::onnx::save, proven against ONNX Runtime: graphs exported, checked by ONNX's checker, run
// in onnxruntime-node (scripts/onnx_run.js) on the same inputs, and compared with loom's outputs;
// greedy decoding of the translation model through its exported step gives loom's tokens.
// The ONNX Runtime cases need node (LOOM_NODE) and onnxruntime-node in LOOM_ORT_DIR (both
// installed by scripts/setup): without node the executable exits 77, which CTest reports as
// skipped, with the reason.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "loom/io/safetensors.hpp"
#include "loom/loom.hpp"
#include "loom/nn/decoder.hpp"
#include "loom/onnx/export.hpp"
#include "translation_onnx.hpp"

using namespace loom;
namespace fs = std::filesystem;

namespace {

fs::path work_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("loom_onnx_test_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// One feed, as loom takes it and as the safetensors file for ONNX Runtime holds it (ints as I64,
// masks as BOOL).
struct feeds {
  std::vector<feed> loom;
  tensor_file file;
  std::deque<tensor<float>> reals;  // what loom's feeds borrow
  std::deque<tensor<std::int32_t>> ints;
  std::deque<tensor<std::uint8_t>> masks;
  template <class E>
  void add(const std::string& name, const tensor<E>& t) {
    if constexpr (std::is_same_v<E, float>) loom.emplace_back(name, reals.emplace_back(t));
    else if constexpr (std::is_same_v<E, std::int32_t>) loom.emplace_back(name, ints.emplace_back(t));
    else loom.emplace_back(name, masks.emplace_back(t));
    if constexpr (std::is_same_v<E, std::int32_t>) {
      file.tensors[name] = to_stored(tensor_cast<std::int64_t>(t));
    } else if constexpr (std::is_same_v<E, std::uint8_t>) {
      stored_tensor s = to_stored(t);
      s.type = storage_type::boolean;
      file.tensors[name] = s;
    } else {
      file.tensors[name] = to_stored(t);
    }
  }
};

// Runs `model` in ONNX Runtime on `in`; returns every output. ONNX's checker reads the file first.
tensor_file run_ort(const fs::path& model, const tensor_file& in) {
  onnx::check_file(model.string());
  const fs::path in_path = work_dir() / (model.stem().string() + ".in.safetensors");
  const fs::path out_path = work_dir() / (model.stem().string() + ".out.safetensors");
  write_safetensors(in_path.string(), in);
  const std::string cmd = std::string(LOOM_NODE) + " " + LOOM_SOURCE_DIR + "/scripts/onnx_run.js " + LOOM_ORT_DIR +
                          " " + model.string() + " " + in_path.string() + " " + out_path.string();
  INFO(cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  return read_safetensors(out_path.string());
}

double max_abs_diff(tensor_view<const float> loom_out, const stored_tensor& ort_out) {
  const tensor<float> o = to_tensor<float>(ort_out);
  REQUIRE(o.size() == loom_out.size());
  double worst = 0;
  for (std::int64_t i = 0; i < o.size(); ++i) {
    const double a = loom_out.data[i], b = o[i];
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) && std::isnan(b)) continue;
      return INFINITY;  // NaN on one side only
    }
    if (std::isinf(a) && a == b) continue;
    worst = std::max(worst, std::abs(a - b));
  }
  return worst;
}

tensor<float> random_tensor(dims_t d, std::uint64_t seed, float scale = 1) {
  tensor<float> t(d);
  rng gen(seed);
  for (std::int64_t i = 0; i < t.size(); ++i) t[i] = scale * static_cast<float>(gen.normal());
  return t;
}

}  // namespace

TEST_CASE("onnx: a graph of the element-wise, reduction, shape and mask ops matches ONNX Runtime") {
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<8>>>();
  auto len = input<"len", shape<dyn<"B">>, int>();
  auto w = param<"w", shape<fix<8>, fix<8>>>();
  auto g1 = param<"g1", shape<fix<8>>>();
  auto b1 = param<"b1", shape<fix<8>>>();
  auto h = layer_norm<1e-5>(matmul(x, w), g1, b1);
  auto s = matmul<false, true>(h, h);  // [B, T, T]
  auto p = softmax(mask_padding(mask_causal(scale<0.35>(s)), len));
  auto y = gelu(matmul(p, h)) + silu(h) * sigmoid(h) - loom::tanh(h) / (loom::exp(neg(loom::abs(h))) + sigmoid(h));
  auto z = reduce_sum<1, true>(square(y)) + mean<-1, true>(loom::sqrt(loom::abs(y))) + amax<1, true>(relu(y));
  auto r = rms_norm<1e-6>(transpose<1, 0, 2>(concat<1>(y, y)), g1);
  auto g = make_graph(named<"scores">(p), z, r, gelu_tanh(slice<-1, fix<2>, fix<4>>(y)));

  auto params = g.make_params<float>(7);
  feeds in;
  in.add("x", random_tensor({2, 5, 8}, 11));
  in.add("len", tensor<std::int32_t>({2}, {5, 3}));
  auto run = g.executor<float>(params, {.inference = true});
  run.forward(in.loom);

  const fs::path model = work_dir() / "ops.onnx";
  onnx::save(g, params, model.string());
  onnx::check_file(model.string());
  const tensor_file out = run_ort(model, in.file);
  REQUIRE(out.tensors.size() == 4);
  CHECK(max_abs_diff(run.output("scores"), out.tensors.at("scores")) <= 1e-5);
  CHECK(max_abs_diff(run.output(1), out.tensors.at("output1")) <= 1e-5);
  CHECK(max_abs_diff(run.output(2), out.tensors.at("output2")) <= 1e-5);
  CHECK(max_abs_diff(run.output(3), out.tensors.at("output3")) <= 1e-5);
}

TEST_CASE("onnx: rope in both layouts, positional encoding, embedding and a bool mask match ONNX Runtime") {
  auto tok = input<"tok", shape<dyn<"B">, dyn<"T">>, int>();
  auto pos = input<"pos", shape<dyn<"B">, dyn<"T">>, int>();
  auto allowed = input<"allowed", shape<dyn<"B">, dyn<"T">>, bool>();
  auto emb = param<"emb", shape<fix<11>, fix<8>>>();
  auto x = add_positional_encoding(embedding(tok, emb), pos);           // [B, T, 8]
  auto heads = transpose<0, 2, 1, 3>(reshape<shape<dyn<"B">, dyn<"T">, fix<2>, fix<4>>>(x));  // [B, 2, T, 4]
  auto a = rope<rope_layout::rotate_half>(heads, pos);
  auto b = rope<rope_layout::interleaved, 500.0>(heads);
  auto scores = mask_bool<1>(matmul<false, true>(a, b), allowed);     // [B, 2, T, T], allowed [B, T] per key
  auto g = make_graph(softmax(scores), add_positional_encoding(x));

  auto params = g.make_params<float>(3);
  feeds in;
  in.add("tok", tensor<std::int32_t>({2, 3}, {1, 4, 10, 0, 7, 2}));
  in.add("pos", tensor<std::int32_t>({2, 3}, {0, 1, 2, 5, 6, 7}));
  in.add("allowed", tensor<std::uint8_t>({2, 3}, {1, 1, 0, 1, 1, 1}));
  auto run = g.executor<float>(params, {.inference = true});
  run.forward(in.loom);

  const fs::path model = work_dir() / "positions.onnx";
  onnx::save(g, params, model.string());
  const tensor_file out = run_ort(model, in.file);
  CHECK(max_abs_diff(run.output(0), out.tensors.at("output0")) <= 1e-5);
  CHECK(max_abs_diff(run.output(1), out.tensors.at("output1")) <= 1e-5);
}

TEST_CASE("onnx: the translation model's encoder and decoding step match loom, and greedy decoding through the "
          "exported step gives loom's translations") {
  constexpr auto cfg = translation::config<>;
  using eval_model = nn::seq2seq<cfg, nn::eval_mode>;
  using decode_model = nn::seq2seq<cfg, nn::decode_mode>;
  auto memory_graph = std::apply([](auto... m) { return make_graph(m...); }, eval_model::cross_memory());
  auto step_graph = make_graph(decode_model::logits());
  auto params = make_graph(eval_model::logits()).make_params<float>(5);
  translation::task t(9999, 200, 10, 40, 1);

  // loom: the encoder once, then greedy decoding through the KV cache (as examples/translate)
  const auto loom_translations = translation::translate<cfg>(t, t.data.test, memory_graph, step_graph, params, 0);
  // the same in ONNX Runtime through the exported models (the step's weights as external data)
  const fs::path dir = work_dir() / "translation";
  const auto check = translation::export_onnx(dir.string(), t, t.data.test, loom_translations, memory_graph, step_graph,
                                              params, {}, LOOM_ORT_DIR, std::string(LOOM_SOURCE_DIR) + "/scripts", 20,
                                              /*external_data=*/true);
  REQUIRE(check.checked);
  CHECK(fs::exists(dir / "decoder_step.onnx.data"));
  onnx::check_file((dir / "encoder.onnx").string());
  onnx::check_file((dir / "decoder_step.onnx").string());
  CHECK(check.total == t.data.test.size());
  CHECK(check.identical == check.total);

  // the encoder's outputs (each decoder layer's projected memory), ONNX Runtime's against loom's
  std::vector<std::size_t> idx(t.data.test.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  const auto batch = make_batch(t.data.test, idx, t.source, t.target);
  auto memory = memory_graph.executor<float>(params, {.inference = true});
  memory.forward({{"src", batch.src}, {"src_len", batch.src_len}});
  const tensor_file mem = read_safetensors((dir / "memory.safetensors").string());
  REQUIRE(mem.tensors.size() == memory.named_feeds().size());
  for (const feed& f : memory.named_feeds()) {
    INFO(f.name());
    CHECK(max_abs_diff(memory.output(f.name()), mem.tensors.at(f.name())) <= 1e-5);
  }
}

namespace {

constexpr nn::decoder_config llama_gqa{.family = nn::decoder_family::llama, .d_model = 16, .heads = 4, .kv_heads = 2,
                                       .ffn = 24, .layers = 2, .vocab = 11, .eps = 1e-5, .rope_theta = 500000};
constexpr nn::decoder_config gpt2_small{.family = nn::decoder_family::gpt2, .d_model = 16, .heads = 2, .ffn = 64,
                                        .layers = 2, .vocab = 13, .max_positions = 12, .eps = 1e-5};

// A decoder-only model's decoding step, exported: a prefill of 5 tokens from empty caches, then
// one more token fed the prefill's present states, in ONNX Runtime and in loom (kv_cache).
template <nn::decoder_config C>
void check_decoder_step(const std::string& tag) {
  using decode = nn::decoder_lm<C, nn::decode_mode>;
  auto step_graph = make_graph(decode::logits());
  auto params = make_graph(nn::decoder_lm<C, nn::eval_mode>::logits()).template make_params<float>(9);
  const fs::path model = work_dir() / (tag + "_step.onnx");
  onnx::save(step_graph, params, model.string());

  const std::int64_t batch = 2, prompt = 5;
  auto run = step_graph.template executor<float>(params, {.inference = true});
  auto cache = nn::kv_cache<float>::of<decode>(batch, 8);
  tensor_file states;  // the ONNX model's: empty before the prefill
  for (const std::string& name : cache.names()) {
    const int in = step_graph.plan().input_index(name);
    const auto& d = step_graph.plan().dims[static_cast<std::size_t>(in)];
    states.tensors[name] = to_stored(tensor<float>(dims_t{batch, d[1].constant, 0, d[3].constant}));
  }
  for (const std::int64_t t : {prompt, std::int64_t{1}}) {
    const std::int64_t p0 = cache.length();
    tensor<std::int32_t> tok(dims_t{batch, t}), pos(dims_t{batch, t}), first(dims_t{batch}, {0, 0});
    for (std::int64_t i = 0; i < tok.size(); ++i) {
      tok[i] = static_cast<std::int32_t>((i * 7 + 3 + p0) % C.vocab);
      pos[i] = static_cast<std::int32_t>(p0 + i % t);
    }
    feeds in;
    in.add("tokens", tok);
    in.add("positions", pos);
    in.add("first", first);
    nn::decode_step(run, cache, in.loom);
    for (const auto& [name, st] : states.tensors) in.file.tensors[name] = st;
    const tensor_file out = run_ort(model, in.file);
    INFO(tag << ", " << t << " new tokens after " << p0);
    CHECK(max_abs_diff(run.output(), out.tensors.at("output0")) <= 1e-5);
    for (auto& [name, st] : states.tensors) {
      st = out.tensors.at("present." + name);
      CHECK(st.shape[2] == p0 + t);  // [B, H, P + T, d]
    }
  }
}

}  // namespace

TEST_CASE("onnx: the decoding steps of a Llama-style (GQA, RoPE, RMSNorm, SwiGLU) and a GPT-2-style model match "
          "loom's, prefill then one step through the present states") {
  check_decoder_step<llama_gqa>("llama");
  check_decoder_step<gpt2_small>("gpt2");
}

namespace {
// An op of a user's own with its ONNX mapping in its declaration (as docs/onnx.md shows it).
struct softsign_op : pointwise<softsign_op> {
  static constexpr std::string_view name = "test.softsign";
  template <class T> static T f(T x) { return x / (1 + std::abs(x)); }
  template <class T> static T df(T x, T) { return 1 / ((1 + std::abs(x)) * (1 + std::abs(x))); }
  static std::string to_onnx(onnx_emitter& e) { return e.add("Softsign", {e.input(0)}); }
};
// One without: save(plan, ...) names it (save(graph, ...) does not compile:
// tests/compile_fail/onnx_unmapped_op.cpp).
struct twice_op : pointwise<twice_op, pointwise_reads::none> {
  static constexpr std::string_view name = "test.twice";
  template <class T> static T f(T x) { return 2 * x; }
  template <class T> static T df(T, T) { return T(2); }
};
}  // namespace

TEST_CASE("onnx: a user's op exports through the mapping in its declaration, and one without a mapping is named") {
  auto x = input<"x", shape<dyn<"N">, fix<3>>>();
  auto g = make_graph(op_fn<softsign_op>{}(x));
  param_store<float> none;
  const fs::path model = work_dir() / "softsign.onnx";
  onnx::save(g, none, model.string());
  feeds in;
  in.add("x", random_tensor({4, 3}, 2, 3));
  auto run = g.executor<float>(none, {.inference = true});
  run.forward(in.loom);
  CHECK(max_abs_diff(run.output(0), run_ort(model, in.file).tensors.at("output0")) <= 1e-6);

  auto unmapped = make_graph(op_fn<twice_op>{}(op_fn<softsign_op>{}(x)));
  CHECK(onnx::unsupported_ops(unmapped.plan()) == std::vector<std::string>{"test.twice"});
  CHECK_THROWS_WITH(onnx::save(unmapped.plan(), none, (work_dir() / "twice.onnx").string()),
                    Catch::Contains("test.twice") && Catch::Contains("to_onnx"));
  CHECK_FALSE(fs::exists(work_dir() / "twice.onnx"));
  // the executor's plan holds fused nodes, which are exported from the graph's plan instead
  auto q = input<"q", shape<dyn<"T">, fix<4>>>();
  auto attn = make_graph(matmul(softmax(scale<0.5>(matmul<false, true>(q, q))), q));
  auto fused = attn.executor<float>(none);
  REQUIRE(onnx::unsupported_ops(fused.plan()) == std::vector<std::string>{"attention"});
  CHECK_THROWS_WITH(onnx::save(fused.plan(), none, (work_dir() / "fused.onnx").string()),
                    Catch::Contains("fused") && Catch::Contains("graph's plan"));
  CHECK_NOTHROW(onnx::save(attn, none, (work_dir() / "fused.onnx").string()));
}

TEST_CASE("onnx: what cannot be exported is a clear error, and a failed save leaves the file as it was") {
  auto x = input<"x", shape<dyn<"B">, fix<4>>>();
  auto w = param<"w", shape<fix<4>, fix<3>>>();
  auto target = input<"target", shape<dyn<"B">>, int>();
  auto loss_graph = make_graph(cross_entropy(matmul(x, w), target));
  auto params = loss_graph.make_params<float>(1);
  const std::string path = (work_dir() / "refused.onnx").string();
  std::ofstream(path) << "before";
  // the loss has a mapping that refuses it (a training loss)
  CHECK_THROWS_WITH(onnx::save(loss_graph.plan(), params, path), Catch::Contains("cross_entropy") &&
                                                                     Catch::Contains("training loss"));
  // a parameter the store lacks, or of another shape
  auto logits_graph = make_graph(matmul(x, w));
  param_store<float> none;
  CHECK_THROWS_AS(onnx::save(logits_graph, none, path), missing_error);
  param_store<float> wrong;
  wrong.set("w", tensor<float>({3, 4}));
  CHECK_THROWS_AS(onnx::save(logits_graph, wrong, path), shape_error);
  // a directory that does not exist
  CHECK_THROWS_AS(onnx::save(logits_graph, params, (work_dir() / "no/such/dir.onnx").string()), io_error);
  // every refused save left the file as it was
  auto content = [&] {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  CHECK(content() == "before");
  // a save that succeeds replaces it whole (a graph with no parameter, with an empty store)
  auto y = input<"y", shape<dyn<"N">>>();
  onnx::save(make_graph(reshape<shape<dyn<"N">, fix<1>>>(y)), none, path);
  CHECK(content() != "before");
  CHECK_NOTHROW(onnx::check_file(path));
  CHECK_THROWS_AS(onnx::check_file((work_dir() / "missing.onnx").string()), io_error);
}

int main(int argc, char* argv[]) {
  bool listing = false;  // CTest's discovery lists the cases, whatever is installed
  for (int i = 1; i < argc; ++i) listing = listing || std::string(argv[i]).rfind("--list", 0) == 0;
  if (listing) return Catch::Session().run(argc, argv);
  if (std::string(LOOM_NODE).empty() || std::string(LOOM_NODE).find("NOTFOUND") != std::string::npos) {
    std::puts("skipped: node (Node.js) was not found when loom was configured; ONNX Runtime cannot run");
    return 77;
  }
  if (!fs::exists(fs::path(LOOM_ORT_DIR) / "node_modules" / "onnxruntime-node")) {
    std::printf("onnxruntime-node is not installed in %s: run scripts/setup\n", LOOM_ORT_DIR);
    return 1;
  }
  const int rc = Catch::Session().run(argc, argv);
  std::error_code ec;
  fs::remove_all(work_dir(), ec);
  return rc;
}
