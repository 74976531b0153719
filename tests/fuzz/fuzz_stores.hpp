// The parameter stores the fuzz target loads into, and that fuzz_seeds writes files of: a
// MultiheadAttention (D = 2) under "att.", a one-layer nn.Transformer (D = 2, ffn 3) and a
// small model for checkpoints. Built by hand, with PyTorch's names, so that the fuzz build
// needs only loom's readers and writers (io/, train/optim), not the graph machinery.
#pragma once

#include <cstdint>
#include <string>

#include "loom/core/params.hpp"
#include "loom/train/optim.hpp"

namespace fuzz {

inline loom::tensor<float> counting(loom::dims_t dims, float start) {
  loom::tensor<float> t(dims);
  for (std::int64_t i = 0; i < t.size(); ++i) t[i] = start + 0.25f * static_cast<float>(i);
  return t;
}

// in_proj_weight [3D, D], in_proj_bias [3D], out_proj.weight [D, D], out_proj.bias [D]
inline void add_attention(loom::param_store<float>& p, const std::string& prefix, std::int64_t d) {
  p.set(prefix + "in_proj_weight", counting({3 * d, d}, 0.1f));
  p.set(prefix + "in_proj_bias", counting({3 * d}, 0.2f));
  p.set(prefix + "out_proj.weight", counting({d, d}, 0.3f));
  p.set(prefix + "out_proj.bias", counting({d}, 0.4f));
}

inline void add_linear(loom::param_store<float>& p, const std::string& prefix, std::int64_t out, std::int64_t in) {
  p.set(prefix + "weight", counting({out, in}, 0.5f));
  p.set(prefix + "bias", counting({out}, 0.6f));
}

struct fixture {
  loom::param_store<float> attention, transformer, checkpoint;
};

/// The stores, made once.
inline const fixture& stores() {
  static const fixture f = [] {
    constexpr std::int64_t d = 2, ffn = 3;
    fixture r;
    add_attention(r.attention, "att.", d);
    const std::string enc = "encoder.layers.0.", dec = "decoder.layers.0.";
    add_attention(r.transformer, enc + "self_attn.", d);
    add_linear(r.transformer, enc + "linear1.", ffn, d);
    add_linear(r.transformer, enc + "linear2.", d, ffn);
    for (const char* norm : {"norm1.", "norm2."}) add_linear(r.transformer, enc + norm, d, 1);
    add_attention(r.transformer, dec + "self_attn.", d);
    add_attention(r.transformer, dec + "multihead_attn.", d);
    add_linear(r.transformer, dec + "linear1.", ffn, d);
    add_linear(r.transformer, dec + "linear2.", d, ffn);
    for (const char* norm : {"norm1.", "norm2.", "norm3."}) add_linear(r.transformer, dec + norm, d, 1);
    for (const char* norm : {"encoder.norm.", "decoder.norm."}) add_linear(r.transformer, norm, d, 1);
    // LayerNorm weights are [D], not [D, 1]
    for (const auto& name : r.transformer.names())
      if (name.find("norm") != std::string::npos && name.ends_with("weight"))
        r.transformer.set(name, counting({d}, 1.0f));
    r.checkpoint.set("embed.weight", counting({5, 2}, -1.0f));
    r.checkpoint.set("out.bias", counting({3}, 2.0f));
    return r;
  }();
  return f;
}

/// One Adam step with fixed gradients, so that the optimizer has state to lose.
inline void step_once(loom::param_store<float>& p, loom::optimizer<float>& opt) {
  for (auto& [name, e] : p) e.grad.fill(0.5f);
  opt.step();
}

}  // namespace fuzz
