// The graphs the precision tests (test_precision, test_int8) measure against double, each run
// through precision_report with the options given: multi-head self-attention with causal and
// padding masks, the translation model's loss (examples/translation.hpp), the language model's
// loss (examples/charlm and generate's GPT-like model) and a Llama-style decoder's loss, at fixed
// initialisations and inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loom/graph/precision_report.hpp"
#include "loom/loom.hpp"
#include "loom/nn/decoder.hpp"
#include "test_support.hpp"
#include "translation.hpp"

namespace test {

/// Eight training pairs of the translation task, as its model's feeds take them.
inline loom::seq2seq_batch translation_batch() {
  translation::task t(9999, 8, 2, 2, 1);
  std::vector<std::size_t> idx{0, 1, 2, 3, 4, 5, 6, 7};
  return loom::make_batch(t.data.train, idx, t.source, t.target);
}

/// nn::self_attention (4 heads, D 16) over x [2, 24, 16], causal, the second sequence padded
/// after 17 positions. Parameters: a.in_proj_weight, a.in_proj_bias, a.out_proj.{weight,bias}.
inline loom::precision_result attention_report(loom::precision_options options = {}) {
  using namespace loom;
  constexpr long D = 16;
  auto x = input<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>();
  auto len = input<"len", shape<dyn<"B">>, int>();
  auto g = make_graph(nn::self_attention<"a", 4>(x, nn::causal, nn::padding(len)));
  auto p = g.make_params<double>(3);
  randomize(p, 4);
  const auto xs = random_tensor<double>({2, 24, D}, 5);
  const tensor<std::int32_t> ls({2}, {24, 17});
  return precision_report(g, p, {{"x", xs}, {"len", ls}}, options);
}

/// The translation model's loss (2 + 2 layers, d_model 64) on translation_batch().
inline loom::precision_result translation_report(loom::precision_options options = {}) {
  using namespace loom;
  constexpr auto cfg = translation::config<>;
  auto g = make_graph(nn::seq2seq<cfg, nn::eval_mode>::loss<translation::pad>());
  auto p = g.make_params<double>(1);
  const auto b = translation_batch();
  return precision_report(g, p, {{"src", b.src}, {"src_len", b.src_len}, {"tgt", b.tgt}, {"target", b.target}},
                          options);
}

/// A language model's loss g (feeds "tokens" and "target", vocabulary 29) over params on 2 ×
/// `len` tokens: token i is (i · a + 3) mod 29, its target (i · b + 1) mod 29.
template <class Graph>
loom::precision_result next_token_report(const Graph& g, const loom::param_store<double>& params, std::int64_t len,
                                         std::int64_t a, std::int64_t b, loom::precision_options options) {
  loom::tensor<std::int32_t> tokens({2, len}), target({2, len});
  for (std::int64_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * a + 3) % 29);
    target[i] = static_cast<std::int32_t>((i * b + 1) % 29);
  }
  return loom::precision_report(g, params, {{"tokens", tokens}, {"target", target}}, options);
}

/// The language model of examples/charlm and examples/generate (nn::language_model: GPT-like,
/// LayerNorm, sinusoidal positions; 2 layers, d 32, 2 heads of 16) and its loss on 2 × 40
/// tokens: 40 keys, so the fused attention runs its blocked kernels (their products bf16 under
/// precision = bf16).
inline loom::precision_result language_model_report(loom::precision_options options = {}) {
  using namespace loom;
  constexpr nn::transformer_config c{.d_model = 32, .heads = 2, .ffn = 64, .decoder_layers = 2, .tgt_vocab = 29};
  auto g = make_graph(nn::language_model<c, nn::eval_mode>::loss());
  return next_token_report(g, g.make_params<double>(6), 40, 11, 13, options);
}

/// A Llama-style decoder's loss (RMSNorm, RoPE, GQA, SwiGLU; 2 layers, d 32) on 2 × 12 tokens.
inline loom::precision_result llama_report(loom::precision_options options = {}) {
  using namespace loom;
  constexpr nn::decoder_config c{.family = nn::decoder_family::llama, .d_model = 32, .heads = 4, .kv_heads = 2,
                                 .ffn = 48, .layers = 2, .vocab = 29, .eps = 1e-5};
  auto g = make_graph(nn::decoder_lm<c, nn::train_mode>::loss());
  return next_token_report(g, g.make_params<double>(2), 12, 7, 5, options);
}

}  // namespace test
