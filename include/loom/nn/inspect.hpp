// Reading inside a model: the attention weights of one layer of an encoder–decoder.
//
// A graph node is its type, so building the same expression again names the same node:
// these functions rebuild a layer's input with the functions the model itself uses and
// return the weights node, which executor::value() then reads after a forward of the model.
#pragma once

#include "loom/nn/transformer.hpp"

namespace loom::nn {

namespace detail {

// The output of the first I decoder layers (the input of layer I).
template <transformer_config C, class Mode, long I, class SelfMasks, class CrossMasks, class X, class Mem, class Seed>
constexpr auto decoder_prefix(X x, Mem mem, Seed seed) {
  if constexpr (I == 0) return x;
  else
    return block<decoder_layer_fn<layer_name<"decoder", I - 1>(), C, Mode, SelfMasks, CrossMasks>,
                 decltype(decoder_prefix<C, Mode, I - 1, SelfMasks, CrossMasks>(x, mem, seed)), Mem, Seed>{};
}

template <fixed_string P, transformer_config C, class Mode, class X, class Mem, class Seed, class... S, class... M>
constexpr auto cross_weights_of_layer(X x, Mem mem, Seed seed, type_list<S...>, type_list<M...>) {
  auto h = sublayer<P + ".norm1", C, Mode>(x, seed, [](auto y) { return self_attn<P + ".self_attn", C, Mode, Seed>(y, S{}...); });
  if constexpr (C.norm_first)
    return cross_attention_weights<P + ".multihead_attn", static_cast<int>(C.heads), attn_options<C, Mode>>(
        layer_norm<P + ".norm2", C.eps>(h), mem, M{}...);
  else return cross_attention_weights<P + ".multihead_attn", static_cast<int>(C.heads), attn_options<C, Mode>>(h, mem, M{}...);
}

}  // namespace detail

/// The cross-attention weights [B, H, T, S] of decoder layer `Layer` in
/// seq2seq<C, eval_mode or train_mode>::logits(): row t is how target position t attends
/// over the source. Add it to make_graph next to the logits and read it with value().
template <transformer_config C, long Layer, class Mode = eval_mode>
constexpr auto seq2seq_cross_weights() {
  static_assert(Layer >= 0 && Layer < C.decoder_layers, "seq2seq_cross_weights: no such decoder layer");
  static_assert(!std::is_same_v<Mode, decode_mode>, "seq2seq_cross_weights: use eval_mode (teacher forcing)");
  using model = seq2seq<C, Mode>;
  using self_masks = type_list<causal_t>;
  using cross_masks = type_list<typename model::src_mask>;
  auto y = detail::embed<"tgt_embed", C.tgt_vocab, C, Mode>(typename model::tgt{}, none{}, typename model::seed{});
  auto x = detail::decoder_prefix<C, Mode, Layer, self_masks, cross_masks>(y, model::memory(), typename model::seed{});
  return detail::cross_weights_of_layer<detail::layer_name<"decoder", Layer>(), C, Mode>(
      x, model::memory(), typename model::seed{}, self_masks{}, cross_masks{});
}

}  // namespace loom::nn
