// The Transformer as functions that build one graph: encoder and decoder layers (post-norm or
// pre-norm), stacks of them, a decoder-only language model and an encoder–decoder, each in
// three modes that share every function:
//
//   train_mode   full attention over the sequence; dropout when the config asks for it (on the
//                sublayers' outputs, the feed-forward's hidden layer and the attention weights,
//                as nn.Transformer)
//   eval_mode    the same graph without dropout (evaluation, the reference for decoding)
//   decode_mode  self-attention keys and values from a kv_cache (self_attention_cached),
//                cross-attention from memory projected once per source; no dropout
//
// Parameter names follow torch.nn.Transformer's state_dict: encoder.layers.{i}.self_attn.
// in_proj_weight, ..., linear1.weight, norm1.weight, encoder.norm.weight, decoder.layers.{i}.
// multihead_attn.*, decoder.norm.*; embeddings and the output projection, which
// nn.Transformer leaves to the user, are src_embed.weight, tgt_embed.weight, generator.*
// (and embed.weight, lm_head.* for the decoder-only model).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/core/node.hpp"
#include "loom/nn/attention.hpp"
#include "loom/nn/layers.hpp"
#include "loom/ops.hpp"
#include "loom/ops/positional_encoding.hpp"

namespace loom::nn {

enum class activation { relu, gelu };

/// The sizes and choices of a Transformer (a template argument: everything is fixed at
/// compile time except batch and sequence lengths).
struct transformer_config {
  long d_model = 64;
  long heads = 4;
  long ffn = 256;
  long encoder_layers = 2;
  long decoder_layers = 2;
  long src_vocab = 32;
  long tgt_vocab = 32;
  double dropout = 0.0;     // 0: no dropout nodes at all
  bool norm_first = false;  // pre-norm (true) or post-norm (false, nn.Transformer's default)
  activation act = activation::relu;
  double eps = 1e-5;        // LayerNorm eps (nn.Transformer: 1e-5)
  bool recompute = false;   // train/eval: each layer's interior is recomputed in backward, not kept (checkpoint)
};

}  // namespace loom::nn
// Reflected (core/reflect.hpp): a checkpoint records these fields by name, and a program that
// loads it can say which one differs.
BOOST_HANA_ADAPT_STRUCT(loom::nn::transformer_config, d_model, heads, ffn, encoder_layers, decoder_layers, src_vocab,
                        tgt_vocab, dropout, norm_first, act, eps, recompute);
namespace loom::nn {

struct train_mode {};
struct eval_mode {};
struct decode_mode {};

/// Stands for "no node" where a layer takes an optional input (no dropout seed, no memory).
struct none {};

namespace detail {

/// Checks the config once, however many layers use it (a function of C alone: one
/// instantiation, one static_assert); on failure the stacks build no layer, so nothing follows.
template <transformer_config C>
constexpr bool config_fits() {
  static_assert(heads_split_model_dim<fix<C.d_model>, fix<C.heads>>,
                "transformer_config: d_model must be a multiple of heads (d_model, heads named below)");
  return heads_split_model_dim<fix<C.d_model>, fix<C.heads>>;
}

template <transformer_config C, class Mode>
inline constexpr bool uses_dropout = C.dropout > 0 && std::is_same_v<Mode, train_mode>;

template <transformer_config C, class Mode, class X, class Seed>
constexpr auto drop(X x, Seed seed) {
  if constexpr (uses_dropout<C, Mode>) return dropout<C.dropout>(x, seed);
  else return x;
}

template <transformer_config C>
using act_t = std::conditional_t<C.act == activation::relu, relu_t, gelu_t>;

template <fixed_string P, transformer_config C, class Mode, class X, class Seed>
constexpr auto ffn(X x, Seed seed) {
  if constexpr (uses_dropout<C, Mode>) return feed_forward<P, C.ffn, act_t<C>, C.dropout>(x, seed);
  else return feed_forward<P, C.ffn, act_t<C>>(x);
}

/// The layer's attention options: dropout on the weights in training, as nn.Transformer's
/// layers do (their MultiheadAttention gets the layer's dropout).
template <transformer_config C, class Mode>
inline constexpr mha_options attn_options{.dropout = uses_dropout<C, Mode> ? C.dropout : 0.0};

/// The masks of a layer's attention, with dropout's seed when the attention drops weights.
template <transformer_config C, class Mode, class Seed, class F>
constexpr auto with_seed(F f) {
  if constexpr (uses_dropout<C, Mode>) return f(dropout_seed(Seed{}));
  else return f();
}

template <fixed_string P, transformer_config C, class Mode, class Seed, class X, class... M>
constexpr auto self_attn(X x, M... masks) {
  constexpr int h = static_cast<int>(C.heads);
  if constexpr (std::is_same_v<Mode, decode_mode>) return self_attention_cached<P, h>(x, masks...);
  else return with_seed<C, Mode, Seed>([&](auto... seed) { return self_attention<P, h, attn_options<C, Mode>>(x, masks..., seed...); });
}

template <fixed_string P, transformer_config C, class Mode, class Seed, class X, class Mem, class... M>
constexpr auto cross_attn(X x, Mem mem, M... masks) {
  constexpr int h = static_cast<int>(C.heads);
  if constexpr (std::is_same_v<Mode, decode_mode>) return cross_attention_cached<P, h>(x, masks...);
  else
    return with_seed<C, Mode, Seed>(
        [&](auto... seed) { return cross_attention<P, h, attn_options<C, Mode>>(x, mem, masks..., seed...); });
}

/// One residual sublayer: post-norm  norm(x + drop(f(x)))  or pre-norm  x + drop(f(norm(x))).
template <fixed_string Norm, transformer_config C, class Mode, class X, class Seed, class F>
constexpr auto sublayer(X x, Seed seed, F f) {
  if constexpr (C.norm_first) return add(x, drop<C, Mode>(f(layer_norm<Norm, C.eps>(x)), seed));
  else return layer_norm<Norm, C.eps>(add(x, drop<C, Mode>(f(x), seed)));
}

/// nn.TransformerEncoderLayer: self-attention, then feed-forward.
template <fixed_string P, transformer_config C, class Mode, class... M>
struct encoder_layer_fn {
  template <class X, class Seed>
  constexpr auto operator()(X x, Seed seed) const {
    auto h = sublayer<P + ".norm1", C, Mode>(x, seed, [](auto y) { return self_attn<P + ".self_attn", C, Mode, Seed>(y, M{}...); });
    return sublayer<P + ".norm2", C, Mode>(h, seed, [](auto y) { return ffn<P, C, Mode>(y, Seed{}); });
  }
};

template <class SelfMasks, class CrossMasks>
struct decoder_masks;
template <class... S, class... X>
struct decoder_masks<type_list<S...>, type_list<X...>> {
  template <fixed_string P, transformer_config C, class Mode, class In, class Mem, class Seed>
  static constexpr auto apply(In x, Mem mem, Seed seed) {
    auto h = sublayer<P + ".norm1", C, Mode>(x, seed, [](auto y) { return self_attn<P + ".self_attn", C, Mode, Seed>(y, S{}...); });
    auto c = sublayer<P + ".norm2", C, Mode>(
        h, seed, [](auto y) { return cross_attn<P + ".multihead_attn", C, Mode, Seed>(y, Mem{}, X{}...); });
    (void)mem;  // reached through the type: a graph node is its type
    return sublayer<P + ".norm3", C, Mode>(c, seed, [](auto y) { return ffn<P, C, Mode>(y, Seed{}); });
  }
};

/// nn.TransformerDecoderLayer: masked self-attention, cross-attention, feed-forward.
template <fixed_string P, transformer_config C, class Mode, class SelfMasks, class CrossMasks>
struct decoder_layer_fn {
  template <class X, class Mem, class Seed>
  constexpr auto operator()(X x, Mem mem, Seed seed) const {
    return decoder_masks<SelfMasks, CrossMasks>::template apply<P, C, Mode>(x, mem, seed);
  }
};

template <fixed_string Stack, long I>
constexpr auto layer_name() {
  if constexpr (Stack.length == 0) return "layers." + to_fixed_string<static_cast<int>(I)>();
  else return Stack + ".layers." + to_fixed_string<static_cast<int>(I)>();
}

/// A layer's output; with C.recompute (outside decoding) marked as a checkpoint whose block
/// starts at the layer's inputs, so that backward recomputes the layer's interior.
template <transformer_config C, class Mode, class Out, class... In>
constexpr auto layer_output(Out out, In... inputs) {
  if constexpr (C.recompute && !std::is_same_v<Mode, decode_mode>) return checkpoint(out, inputs...);
  else return out;
}

template <fixed_string Stack, transformer_config C, class Mode, long I, long N, class... M, class X, class Seed>
constexpr auto encoder_stack(X x, Seed seed) {
  if constexpr (I == N || !config_fits<C>()) return x;  // a failed check has said what is wrong
  else
    return encoder_stack<Stack, C, Mode, I + 1, N, M...>(
        layer_output<C, Mode>(block<encoder_layer_fn<layer_name<Stack, I>(), C, Mode, M...>, X, Seed>{}, x), seed);
}

template <transformer_config C, class Mode, long I, class SelfMasks, class CrossMasks, class X, class Mem, class Seed>
constexpr auto decoder_stack(X x, Mem mem, Seed seed) {
  if constexpr (I == C.decoder_layers || !config_fits<C>()) return x;
  else if constexpr (std::is_same_v<Mem, none>)
    return decoder_stack<C, Mode, I + 1, SelfMasks, CrossMasks>(
        layer_output<C, Mode>(
            block<decoder_layer_fn<layer_name<"decoder", I>(), C, Mode, SelfMasks, CrossMasks>, X, Mem, Seed>{}, x),
        mem, seed);
  else
    return decoder_stack<C, Mode, I + 1, SelfMasks, CrossMasks>(
        layer_output<C, Mode>(
            block<decoder_layer_fn<layer_name<"decoder", I>(), C, Mode, SelfMasks, CrossMasks>, X, Mem, Seed>{}, x,
            mem),
        mem, seed);
}

/// A vocabulary size of the config as a dim: fix<V>, or for 0 the dim "V" bound at run time
/// (by the parameters in the store; make_params(seed, {{"V", n}}) creates them).
template <long V>
using vocab_dim = std::conditional_t<(V > 0), fix<V>, dyn<"V">>;

/// Token embedding scaled by √d_model plus sinusoidal positions (from `positions` when
/// decoding, 0..T−1 otherwise), then dropout.
template <fixed_string Name, long Vocab, transformer_config C, class Mode, class Tok, class Pos, class Seed>
constexpr auto embed(Tok tokens, Pos positions, Seed seed) {
  auto table = param<Name + ".weight", shape<vocab_dim<Vocab>, fix<C.d_model>>, init<init_kind::normal>>();
  auto e = scale<loom::detail::sqrt_newton(static_cast<double>(C.d_model))>(loom::embedding(tokens, table));  // [B, T, D]
  if constexpr (std::is_same_v<Pos, none>) return drop<C, Mode>(add_positional_encoding(e), seed);
  else return drop<C, Mode>(add_positional_encoding(e, positions), seed);
}

template <class Mode>
using seed_t = std::conditional_t<std::is_same_v<Mode, train_mode>, input_node<"seed", shape<fix<2>>, int>, none>;

/// The projected memory of every decoder layer's cross-attention, as the outputs
/// `decoder.layers.{i}.multihead_attn.memory_k` / `memory_v` that the decoding graph takes as
/// inputs of the same names (see cross_attention_memory).
template <transformer_config C, class Mem>
constexpr auto decoder_cross_memory(Mem memory) {
  if constexpr (!config_fits<C>()) return std::make_tuple(memory);  // the check has said what is wrong
  else return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::tuple_cat(
        cross_attention_memory<layer_name<"decoder", I>() + ".multihead_attn", static_cast<int>(C.heads)>(memory)...);
  }(std::make_index_sequence<static_cast<std::size_t>(C.decoder_layers)>{});
}

}  // namespace detail

/// The masks of torch.nn.Transformer.forward, as lists of loom mask specs (attention.hpp), one
/// list per kind of attention:
///   Src     the encoder's self-attention: src_mask [S, S] and src_key_padding_mask [B, S]
///   Tgt     the decoder's self-attention: tgt_mask [T, T] and tgt_key_padding_mask [B, T]
///   Memory  the decoder's cross-attention: memory_mask [T, S] and memory_key_padding_mask [B, S]
/// e.g. type_list<causal_t, allowed_t<input_node<"tgt_keys", shape<dyn<"B">, dyn<"T">>, bool>>>
/// for a causal tgt_mask and a tgt_key_padding_mask (negated: loom's True may attend). The
/// default is transformer_body's former fixed choice: src_len padding for the source keys,
/// causal for the target.
template <class Src = type_list<>, class Tgt = type_list<causal_t>, class Memory = type_list<>>
struct transformer_masks {
  using src = Src;
  using tgt = Tgt;
  using memory = Memory;
};

/// The valid source lengths [B] of the default masks (src_key_padding_mask and
/// memory_key_padding_mask as lengths).
using src_len_input = input_node<"src_len", shape<dyn<"B">>, int>;
using default_transformer_masks =
    transformer_masks<type_list<padding_t<src_len_input>>, type_list<causal_t>, type_list<padding_t<src_len_input>>>;

namespace detail {
template <fixed_string Stack, transformer_config C, class Mode, class X, class Seed, class... M>
constexpr auto encoder_stack_with(X x, Seed seed, type_list<M...>) {
  return encoder_stack<Stack, C, Mode, 0, C.encoder_layers, M...>(x, seed);
}
}  // namespace detail

/// torch.nn.Transformer's own forward, on inputs that are already embedded:
///   inputs:  src_x [B, S, D], tgt_x [B, T, D] (real), and the inputs of the masks (Masks,
///            above; by default src_len [B] (int: valid source lengths, PyTorch's
///            src_key_padding_mask and memory_key_padding_mask), and a causal tgt_mask)
///   memory(): encoder stack + encoder.norm -> [B, S, D]
///   output(): decoder stack + decoder.norm -> [B, T, D]
/// Same parameter names as nn.Transformer's state_dict, so its weights load directly.
/// decode_mode: output() runs the decoder over new target positions tgt_x [B, T, D] only,
/// with the self-attention keys and values of past positions from a kv_cache (its states
/// `decoder.layers.{i}.self_attn.cache_k` / `cache_v`) and the cross-attention memory
/// projected once per source by the eval_mode body's cross_memory() (named outputs, fed to
/// the step by name with executor::named_feeds()). The body has no positional
/// encoding, so decoding needs no positions: prefill + one-token steps give the full output
/// (the target masks then see the new queries against all cached keys: causal is offset).
template <transformer_config C, class Mode = eval_mode, class Masks = default_transformer_masks>
struct transformer_body {
  using src_x = input_node<"src_x", shape<dyn<"B">, dyn<"S">, fix<C.d_model>>>;
  using tgt_x = input_node<"tgt_x", shape<dyn<"B">, dyn<"T">, fix<C.d_model>>>;
  using src_len = src_len_input;
  using seed = detail::seed_t<Mode>;

  static constexpr auto memory() {
    static_assert(!std::is_same_v<Mode, decode_mode>, "transformer_body: encode with eval_mode, then decode");
    auto h = detail::encoder_stack_with<"encoder", C, Mode>(src_x{}, seed{}, typename Masks::src{});
    return layer_norm<"encoder.norm", C.eps>(h);
  }
  static constexpr auto output() {
    if constexpr (std::is_same_v<Mode, decode_mode>) {
      auto h = detail::decoder_stack<C, Mode, 0, typename Masks::tgt, typename Masks::memory>(tgt_x{}, none{}, none{});
      return layer_norm<"decoder.norm", C.eps>(h);
    } else {
      auto h = detail::decoder_stack<C, Mode, 0, typename Masks::tgt, typename Masks::memory>(tgt_x{}, memory(), seed{});
      return layer_norm<"decoder.norm", C.eps>(h);
    }
  }

  /// For decoding: the projected memory [B, H, S, d_k] of every decoder layer's
  /// cross-attention, computed once per source, as named outputs that the decoding graph
  /// takes as inputs of the same names (executor::named_feeds()).
  static constexpr auto cross_memory() { return detail::decoder_cross_memory<C>(memory()); }
};

/// A decoder-only language model (GPT-like): embed, then `C.decoder_layers` layers of
/// causal self-attention + feed-forward (nn.TransformerEncoderLayer with a causal mask,
/// named layers.{i}.*), a final LayerNorm `norm`, and `lm_head` to V logits.
///   vocabulary: V = C.tgt_vocab, or, when C.tgt_vocab is 0, the dim "V" learnt at run time:
///            the shapes of embed.weight [V, D] and lm_head.* [V, D], [V] in the store bind it
///            (create them with make_params<T>(seed, {{"V", vocab.size()}}), or load them).
///   inputs:  tokens [B, T] (int); train/eval: positions 0..T−1; decode: positions [B, T]
///            (int) and first [B] (int: the first real key of each right-aligned prompt),
///            plus the cache states layers.{i}.self_attn.cache_k / cache_v [B, H, P, d_k]
///            (inputs, and outputs [B, H, P + T, d_k] of the same names: see kv_cache);
///            train with dropout: seed [2] (int); loss(): target [B, T] (int: the next tokens)
///   output:  logits [B, T, V]
/// Positions are sinusoidal and unbounded, but a model has only seen the positions of its
/// training windows: generating past them (T or the cache beyond the window) degrades.
template <transformer_config C, class Mode = eval_mode>
struct language_model {
  using tokens = input_node<"tokens", shape<dyn<"B">, dyn<"T">>, int>;
  using positions = input_node<"positions", shape<dyn<"B">, dyn<"T">>, int>;
  using first = input_node<"first", shape<dyn<"B">>, int>;
  using target = input_node<"target", shape<dyn<"B">, dyn<"T">>, int>;
  using seed = detail::seed_t<Mode>;
  using vocab = detail::vocab_dim<C.tgt_vocab>;

  static constexpr auto logits() {
    if constexpr (std::is_same_v<Mode, decode_mode>) {
      auto x = detail::embed<"embed", C.tgt_vocab, C, Mode>(tokens{}, positions{}, none{});
      auto h = detail::encoder_stack<"", C, Mode, 0, C.decoder_layers, causal_t, left_padding_t<first>>(x, none{});
      return head(layer_norm<"norm", C.eps>(h));
    } else {
      auto x = detail::embed<"embed", C.tgt_vocab, C, Mode>(tokens{}, none{}, seed{});
      auto h = detail::encoder_stack<"", C, Mode, 0, C.decoder_layers, causal_t>(x, seed{});
      return head(layer_norm<"norm", C.eps>(h));
    }
  }

  /// Mean cross-entropy of logits() against target (the next token at each position),
  /// ignoring IgnoreIndex, with label smoothing: the training loss.
  template <long IgnoreIndex = -100, double LabelSmoothing = 0.0>
  static constexpr auto loss() {
    static_assert(!std::is_same_v<Mode, decode_mode>, "language_model: the loss is for train_mode or eval_mode");
    return cross_entropy<IgnoreIndex, LabelSmoothing>(logits(), target{});
  }

 private:
  /// lm_head: x Wᵀ + b, W [V, D], b [V] (nn.Linear's layout and initialisation).
  template <class X>
  static constexpr auto head(X x) {
    auto w = param<"lm_head.weight", shape<vocab, fix<C.d_model>>, init<init_kind::linear_weight>>();
    auto b = param<"lm_head.bias", shape<vocab>, init<init_kind::linear_bias, C.d_model>>();
    return add(matmul<false, true>(x, w), b);
  }
};

/// An encoder–decoder Transformer (nn.Transformer plus embeddings and a generator).
///   inputs:  src [B, S] (int), src_len [B] (int: valid source lengths), tgt [B, T] (int: the
///            decoder's inputs, BOS then the shifted target); train with dropout: seed [2];
///            loss: target [B, T] (int, PadId where there is no token);
///            decode: positions [B, T] and the cache and memory inputs (see below).
template <transformer_config C, class Mode = eval_mode>
struct seq2seq {
  static_assert(C.src_vocab > 0 && C.tgt_vocab > 0,
                "seq2seq: the vocabulary sizes must be fixed (a run-time vocabulary is language_model's only)");
  using src = input_node<"src", shape<dyn<"B">, dyn<"S">>, int>;
  using src_len = input_node<"src_len", shape<dyn<"B">>, int>;
  using tgt = input_node<"tgt", shape<dyn<"B">, dyn<"T">>, int>;
  using target = input_node<"target", shape<dyn<"B">, dyn<"T">>, int>;
  using positions = input_node<"positions", shape<dyn<"B">, dyn<"T">>, int>;
  using seed = detail::seed_t<Mode>;
  using src_mask = padding_t<src_len>;

  /// The encoder's output [B, S, D] (after encoder.norm).
  static constexpr auto memory() {
    static_assert(!std::is_same_v<Mode, decode_mode>, "seq2seq: encode with eval_mode, then decode");
    auto x = detail::embed<"src_embed", C.src_vocab, C, Mode>(src{}, none{}, seed{});
    auto h = detail::encoder_stack<"encoder", C, Mode, 0, C.encoder_layers, src_mask>(x, seed{});
    return layer_norm<"encoder.norm", C.eps>(h);
  }

  /// Logits [B, T, V] for the decoder inputs tgt.
  static constexpr auto logits() {
    if constexpr (std::is_same_v<Mode, decode_mode>) {
      auto y = detail::embed<"tgt_embed", C.tgt_vocab, C, Mode>(tgt{}, positions{}, none{});
      auto h = detail::decoder_stack<C, Mode, 0, type_list<causal_t>, type_list<src_mask>>(y, none{}, none{});
      return linear<"generator", C.tgt_vocab>(layer_norm<"decoder.norm", C.eps>(h));
    } else {
      auto y = detail::embed<"tgt_embed", C.tgt_vocab, C, Mode>(tgt{}, none{}, seed{});
      auto h = detail::decoder_stack<C, Mode, 0, type_list<causal_t>, type_list<src_mask>>(y, memory(), seed{});
      return linear<"generator", C.tgt_vocab>(layer_norm<"decoder.norm", C.eps>(h));
    }
  }

  /// Mean cross-entropy of logits() against target, ignoring PadId, with label smoothing.
  template <int PadId, double LabelSmoothing = 0.0>
  static constexpr auto loss() {
    return cross_entropy<PadId, LabelSmoothing>(logits(), target{});
  }

  /// For decoding: the projected memory of every decoder layer's cross-attention, computed
  /// once per source from memory(), as named outputs that the decoding graph takes as inputs
  /// of the same names (executor::named_feeds()).
  static constexpr auto cross_memory() { return detail::decoder_cross_memory<C>(memory()); }
};

}  // namespace loom::nn
