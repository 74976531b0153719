// Decoder-only language models of the two families most checkpoints ship in, with the
// parameter names and layouts of their Hugging Face checkpoints, so that a checkpoint's
// tensors are the model's parameters as they are (no renaming, no transposing):
//
//   llama   (Llama, Mistral, Qwen, SmolLM, TinyLlama): pre-RMSNorm, rotary positions on q and k,
//           grouped-query attention (kv_heads ≤ heads), SwiGLU feed-forward, no biases, the
//           lm head optionally tied to the embedding.
//             model.embed_tokens.weight [V, D]
//             model.layers.{i}.input_layernorm.weight [D]
//             model.layers.{i}.self_attn.{q,k,v,o}_proj.weight  [H·Dh, D], [Hkv·Dh, D] ×2, [D, H·Dh]
//             model.layers.{i}.post_attention_layernorm.weight [D]
//             model.layers.{i}.mlp.{gate,up}_proj.weight [F, D], mlp.down_proj.weight [D, F]
//             model.norm.weight [D], lm_head.weight [V, D] (absent when tied)
//   gpt2    (GPT-2): pre-LayerNorm, learned positions, one fused q|k|v projection, GELU with the
//           tanh approximation, biases everywhere, the lm head tied to the embedding. Its
//           projections are Conv1D, stored [in, out] (y = x W + b).
//             transformer.wte.weight [V, D], transformer.wpe.weight [max_positions, D]
//             transformer.h.{i}.ln_1.{weight,bias} [D]
//             transformer.h.{i}.attn.c_attn.{weight [D, 3D], bias [3D]}
//             transformer.h.{i}.attn.c_proj.{weight [D, D], bias [D]}
//             transformer.h.{i}.ln_2.{weight,bias}
//             transformer.h.{i}.mlp.c_fc.{weight [D, F], bias [F]}, mlp.c_proj.{weight [F, D], bias [D]}
//             transformer.ln_f.{weight,bias}
//
// One definition serves training (train_mode / eval_mode: tokens [B, T], positions 0..T−1) and
// KV-cached decoding (decode_mode: tokens [B, T] of new positions, positions [B, T], first [B]
// for right-aligned prompts, and per layer the states `<layer>.self_attn.cache_k` / `cache_v`
// [B, Hkv, P, Dh], keys cached already rotated), so nn::kv_cache, nn::generate and
// nn::beam_search take the decode graph as they take language_model's.
#pragma once

#include <cstdint>
#include <type_traits>

#include "loom/core/node.hpp"
#include "loom/core/reflect.hpp"
#include "loom/nn/attention.hpp"
#include "loom/nn/layers.hpp"
#include "loom/nn/masks.hpp"
#include "loom/nn/transformer.hpp"
#include "loom/ops.hpp"

namespace loom::nn {

/// The block structure of a decoder_config (see the top of this file).
enum class decoder_family : std::uint8_t { llama, gpt2 };

/// A decoder-only model's configuration. The comments give the Hugging Face config.json field
/// each setting is (Llama's name / GPT-2's).
struct decoder_config {
  decoder_family family = decoder_family::llama;
  long d_model = 64;          // hidden_size / n_embd
  long heads = 4;             // num_attention_heads / n_head; head size Dh = d_model / heads
  long kv_heads = 0;          // num_key_value_heads (llama; 0: heads): heads share kv heads in groups
  long ffn = 176;             // intermediate_size / n_inner (GPT-2's null means 4·d_model)
  long layers = 2;            // num_hidden_layers / n_layer
  long vocab = 0;             // vocab_size; 0: the dim "V", bound at run time by the parameters
  long max_positions = 1024;  // n_positions (gpt2: rows of the learned position table)
  double eps = 1e-6;          // rms_norm_eps / layer_norm_epsilon
  double rope_theta = 10000;  // rope_theta (llama)
  rope_layout rope = rope_layout::rotate_half;  // rotate_half: Hugging Face's layout
  bool tied_embeddings = false;  // tie_word_embeddings: lm head = the embedding (gpt2: always)
};

}  // namespace loom::nn
// Reflected (core/reflect.hpp): checkpoints record these fields by name.
BOOST_HANA_ADAPT_STRUCT(loom::nn::decoder_config, family, d_model, heads, kv_heads, ffn, layers, vocab, max_positions,
                        eps, rope_theta, rope, tied_embeddings);
namespace loom::nn {

/// Every query head has a key/value head: kv_heads divides heads.
template <long Heads, long KvHeads>
inline constexpr bool kv_heads_divide_heads = KvHeads > 0 && Heads % KvHeads == 0;

namespace detail {

template <decoder_config C>
inline constexpr long kv_heads_of = C.kv_heads > 0 ? C.kv_heads : C.heads;
template <decoder_config C>
inline constexpr long head_dim_of = C.d_model / C.heads;

/// Checks the config once, however many layers use it.
template <decoder_config C>
constexpr bool decoder_config_fits() {
  static_assert(heads_split_model_dim<fix<C.d_model>, fix<C.heads>>,
                "decoder_config: d_model must be a multiple of heads (d_model, heads named below)");
  static_assert(kv_heads_divide_heads<C.heads, kv_heads_of<C>>,
                "decoder_config: kv_heads must divide heads (heads, kv_heads named below)");
  static_assert(C.family == decoder_family::llama || C.kv_heads == 0 || C.kv_heads == C.heads,
                "decoder_config: gpt2 has one key/value head per query head (kv_heads 0)");
  static_assert(C.ffn > 0 && C.layers >= 0 && C.vocab >= 0 && C.max_positions > 0,
                "decoder_config: ffn and max_positions must be positive, layers and vocab not negative");
  return heads_split_model_dim<fix<C.d_model>, fix<C.heads>> && kv_heads_divide_heads<C.heads, kv_heads_of<C>>;
}

template <decoder_config C, class Mode>
inline constexpr bool decoding = std::is_same_v<Mode, decode_mode>;

/// Rotary embedding of heads [B, N, T, Dh]: at `positions` when decoding, at 0..T−1 otherwise.
template <decoder_config C, class Mode, class X>
constexpr auto rotate(X x) {
  using positions = input_node<"positions", shape<dyn<"B">, dyn<"T">>, int>;
  if constexpr (decoding<C, Mode>) return rope<C.rope, C.rope_theta>(x, positions{});
  else return rope<C.rope, C.rope_theta>(x);
}

/// Causal attention of q [B, H, T, Dh] over k, v [B, Hkv, S, Dh]; when decoding, also hiding
/// the keys before each right-aligned prompt's first token.
template <decoder_config C, class Mode, class Q, class K, class V>
constexpr auto causal_attention(Q q, K k, V v) {
  constexpr attention_options o{.enable_gqa = kv_heads_of<C> != C.heads};
  using first = input_node<"first", shape<dyn<"B">>, int>;
  if constexpr (decoding<C, Mode>) return attention<o>(q, k, v, causal, left_padding_t<first>{});
  else return attention<o>(q, k, v, causal);
}

/// The keys or values a layer attends over: the step's own, or when decoding the layer's
/// cache followed by them (a state of the step graph, see kv_state).
template <fixed_string Name, decoder_config C, class Mode, class X>
constexpr auto cached(X rows) {
  if constexpr (decoding<C, Mode>) return kv_state<Name>(rows);
  else return rows;
}

/// y = x W + b with W [In, Out] (GPT-2's Conv1D).
template <fixed_string Prefix, long Out, class X>
constexpr auto conv1d(X x) {
  using in_dim = dim_at<typename X::shape, -1>;
  auto w = param<Prefix + ".weight", shape<in_dim, fix<Out>>, init<init_kind::normal_std, 20>>();
  auto b = param<Prefix + ".bias", shape<fix<Out>>>();
  return add(matmul(x, w), b);
}

template <fixed_string Prefix, long Out, class X>
constexpr auto proj(X x) {  // a bias-free nn.Linear, initialised as Hugging Face's (N(0, 0.02²))
  using in_dim = dim_at<typename X::shape, -1>;
  return matmul<false, true>(x, param<Prefix + ".weight", shape<fix<Out>, in_dim>, init<init_kind::normal_std, 20>>());
}

template <fixed_string Prefix, decoder_config C, class X>
constexpr auto rms_norm_layer(X x) {
  return rms_norm<C.eps>(x, param<Prefix + ".weight", shape<fix<C.d_model>>, init<init_kind::ones>>());
}

/// A Llama decoder layer:  h = x + o_proj(attn(rope(q), rope(k), v)) over rms-normed x,
/// then h + down_proj(silu(gate_proj(n)) · up_proj(n)), n = rms-normed h.
template <fixed_string P, decoder_config C, class Mode>
struct llama_layer_fn {
  template <class X>
  constexpr auto operator()(X x) const {
    constexpr long h = C.heads, hkv = kv_heads_of<C>, dh = head_dim_of<C>;
    auto n = rms_norm_layer<P + ".input_layernorm", C>(x);
    auto q = rotate<C, Mode>(split_heads<h>(proj<P + ".self_attn.q_proj", h * dh>(n)));
    auto k = rotate<C, Mode>(split_heads<hkv>(proj<P + ".self_attn.k_proj", hkv * dh>(n)));
    auto v = split_heads<hkv>(proj<P + ".self_attn.v_proj", hkv * dh>(n));
    auto o = causal_attention<C, Mode>(q, cached<cache_k_name<P + ".self_attn">, C, Mode>(k),
                                       cached<cache_v_name<P + ".self_attn">, C, Mode>(v));
    auto a = add(x, proj<P + ".self_attn.o_proj", C.d_model>(merge_heads(o)));
    auto m = rms_norm_layer<P + ".post_attention_layernorm", C>(a);
    auto gated = mul(silu(proj<P + ".mlp.gate_proj", C.ffn>(m)), proj<P + ".mlp.up_proj", C.ffn>(m));
    return add(a, proj<P + ".mlp.down_proj", C.d_model>(gated));
  }
};

/// A GPT-2 block:  h = x + c_proj(attn(q, k, v)), q|k|v = c_attn(ln_1(x)),
/// then h + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(h)))).
template <fixed_string P, decoder_config C, class Mode>
struct gpt2_layer_fn {
  template <class X>
  constexpr auto operator()(X x) const {
    constexpr long h = C.heads;
    auto [q, k, v] = split<-1, 3>(conv1d<P + ".attn.c_attn", 3 * C.d_model>(layer_norm<P + ".ln_1", C.eps>(x)));
    auto o = causal_attention<C, Mode>(split_heads<h>(q), cached<cache_k_name<P + ".attn">, C, Mode>(split_heads<h>(k)),
                                       cached<cache_v_name<P + ".attn">, C, Mode>(split_heads<h>(v)));
    auto a = add(x, conv1d<P + ".attn.c_proj", C.d_model>(merge_heads(o)));
    auto m = gelu_tanh(conv1d<P + ".mlp.c_fc", C.ffn>(layer_norm<P + ".ln_2", C.eps>(a)));
    return add(a, conv1d<P + ".mlp.c_proj", C.d_model>(m));
  }
};

template <decoder_config C, class Mode, long I>
constexpr auto decoder_layer_name() {
  if constexpr (C.family == decoder_family::llama) return "model.layers." + to_fixed_string<static_cast<int>(I)>();
  else return "transformer.h." + to_fixed_string<static_cast<int>(I)>();
}

template <decoder_config C, class Mode, long I, class X>
constexpr auto decoder_layers(X x) {
  if constexpr (I == C.layers) return x;
  else {
    constexpr auto name = decoder_layer_name<C, Mode, I>();
    if constexpr (C.family == decoder_family::llama)
      return decoder_layers<C, Mode, I + 1>(block<llama_layer_fn<name, C, Mode>, X>{});
    else return decoder_layers<C, Mode, I + 1>(block<gpt2_layer_fn<name, C, Mode>, X>{});
  }
}

}  // namespace detail

/// A decoder-only language model of family C.family (see the top of this file).
///   inputs:  tokens [B, T] (int); decode_mode: positions [B, T] and first [B] (int), and the
///            cache states (kv_cache); loss(): target [B, T] (int: the next tokens)
///   output:  logits [B, T, V]
/// Initialisation follows Hugging Face's for training from scratch: weights N(0, 0.02²),
/// norms' weights 1, biases 0.
template <decoder_config C, class Mode = eval_mode>
struct decoder_lm {
  using tokens = input_node<"tokens", shape<dyn<"B">, dyn<"T">>, int>;
  using positions = input_node<"positions", shape<dyn<"B">, dyn<"T">>, int>;
  using first = input_node<"first", shape<dyn<"B">>, int>;
  using target = input_node<"target", shape<dyn<"B">, dyn<"T">>, int>;
  using vocab = detail::vocab_dim<C.vocab>;
  static constexpr bool tied = C.tied_embeddings || C.family == decoder_family::gpt2;

  static constexpr auto logits() {
    if constexpr (!detail::decoder_config_fits<C>()) return tokens{};  // the check has said what is wrong
    else if constexpr (C.family == decoder_family::llama) {
      auto h = detail::decoder_layers<C, Mode, 0>(embedding(tokens{}, table()));
      return head(detail::rms_norm_layer<"model.norm", C>(h));
    } else {
      auto h = detail::decoder_layers<C, Mode, 0>(add(embedding(tokens{}, table()), learned_positions()));
      return head(layer_norm<"transformer.ln_f", C.eps>(h));
    }
  }

  /// Mean cross-entropy of logits() against target, ignoring IgnoreIndex: the training loss.
  template <long IgnoreIndex = -100>
  static constexpr auto loss() {
    static_assert(!detail::decoding<C, Mode>, "decoder_lm: the loss is for train_mode or eval_mode");
    return cross_entropy<IgnoreIndex>(logits(), target{});
  }

 private:
  /// The token embedding [V, D].
  static constexpr auto table() {
    constexpr auto name = [] {
      if constexpr (C.family == decoder_family::llama) return fixed_string("model.embed_tokens.weight");
      else return fixed_string("transformer.wte.weight");
    }();
    return param<name, shape<vocab, fix<C.d_model>>, init<init_kind::normal_std, 20>>();
  }
  /// GPT-2's learned positions: rows 0..T−1 of the table, or the rows of `positions` when decoding.
  static constexpr auto learned_positions() {
    auto wpe = param<"transformer.wpe.weight", shape<fix<C.max_positions>, fix<C.d_model>>, init<init_kind::normal_std, 10>>();
    if constexpr (detail::decoding<C, Mode>) return embedding(positions{}, wpe);
    else return slice<0, fix<0>, dyn<"T">>(wpe);
  }
  template <class X>
  static constexpr auto head(X x) {
    if constexpr (tied) return matmul<false, true>(x, table());
    else return matmul<false, true>(x, param<"lm_head.weight", shape<vocab, fix<C.d_model>>, init<init_kind::normal_std, 20>>());
  }
};

}  // namespace loom::nn
