// The Llama-style model of examples/llama, shared with its benchmark (bench/bench_decoder.cpp).
#pragma once

#include <cstdint>

#include "loom/nn/decoder.hpp"

namespace examples {

inline constexpr std::int64_t llama_window = 64;  // the positions the model trains on
// SmolLM-like proportions, scaled down: 4 query heads share 2 key/value heads of size 16.
inline constexpr loom::nn::decoder_config llama_config{.family = loom::nn::decoder_family::llama,
                                                       .d_model = 64,
                                                       .heads = 4,
                                                       .kv_heads = 2,
                                                       .ffn = 176,
                                                       .layers = 2,
                                                       .vocab = 0,  // the text's characters, bound at run time
                                                       .max_positions = llama_window,
                                                       .eps = 1e-5,
                                                       .rope_theta = 10000,
                                                       .tied_embeddings = true};

}  // namespace examples
