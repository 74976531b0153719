// expect: transformer_config: d_model must be a multiple of heads.*heads_split_model_dim<loom::fix<30>, loom::fix<4> >.+evaluates to false
// max-bytes: 4096
// A language model whose d_model (30) is not a multiple of its heads (4): one error for the
// config, not one per layer. (This used to print three errors, 37 KB.)
#include "loom/loom.hpp"
#include "loom/nn/transformer.hpp"
using namespace loom;
constexpr nn::transformer_config cfg{.d_model = 30, .heads = 4, .ffn = 64, .decoder_layers = 3, .tgt_vocab = 16};
auto bad() {
  return make_graph(nn::language_model<cfg, nn::eval_mode>::logits());
}
