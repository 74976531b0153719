// The C++ half of the decoder families' parity test (scripts/decoder_reference.py drives it).
//
//   decoder_parity CONFIG DIR            loads DIR/checkpoint (a Hugging Face folder the script
//                                        wrote) into nn::decoder_lm<CONFIG>, feeds DIR/inputs.safetensors
//                                        (tokens, target) and writes DIR/loom_f64.safetensors and
//                                        loom_f32.safetensors: logits, loss, grad.<name> of the mean
//                                        cross-entropy, and decode_logits (prefill of 4 positions, then
//                                        one-token steps through the KV cache)
//   decoder_parity --refusal CONFIG DIR  only loads DIR/checkpoint: exit 3 with the message when it
//                                        is refused and the store is unchanged, 4 if it changed, 0
//                                        if it loaded
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "loom/loom.hpp"
#include "loom/nn/decoder.hpp"
#include "loom/nn/kv_cache.hpp"
#include "loom/nn/pretrained.hpp"

using namespace loom;

namespace {

// The same configurations as CONFIGS in scripts/decoder_reference.py.
constexpr nn::decoder_config llama{.family = nn::decoder_family::llama,
                                   .d_model = 32,
                                   .heads = 4,
                                   .kv_heads = 2,
                                   .ffn = 48,
                                   .layers = 2,
                                   .vocab = 37,
                                   .max_positions = 64,
                                   .eps = 1e-5,
                                   .rope_theta = 10000};
constexpr nn::decoder_config llama_mqa_tied{.family = nn::decoder_family::llama,
                                            .d_model = 32,
                                            .heads = 4,
                                            .kv_heads = 1,
                                            .ffn = 40,
                                            .layers = 1,
                                            .vocab = 29,
                                            .max_positions = 64,
                                            .eps = 1e-6,
                                            .rope_theta = 500000,
                                            .tied_embeddings = true};
constexpr nn::decoder_config gpt2{.family = nn::decoder_family::gpt2,
                                  .d_model = 32,
                                  .heads = 4,
                                  .ffn = 128,
                                  .layers = 2,
                                  .vocab = 41,
                                  .max_positions = 16,
                                  .eps = 1e-5};
constexpr std::int64_t prefill = 4;

template <nn::decoder_config C, class T>
param_store<T> loaded(const std::string& dir) {
  auto params = make_graph(nn::decoder_lm<C, nn::train_mode>::loss()).template make_params<T>(0);
  nn::load_pretrained(dir + "/checkpoint", C, params);
  return params;
}

template <nn::decoder_config C, class T>
void run(const std::string& dir) {
  using train = nn::decoder_lm<C, nn::train_mode>;
  using decode = nn::decoder_lm<C, nn::decode_mode>;
  auto params = loaded<C, T>(dir);
  const tensor_file inputs = read_safetensors(dir + "/inputs.safetensors");
  const auto tokens = to_tensor<std::int64_t>(inputs.at("tokens"));
  const auto target = to_tensor<std::int64_t>(inputs.at("target"));
  const std::int64_t B = tokens.dim(0), T_len = tokens.dim(1);

  tensor_file out;
  auto g = make_graph(train::loss(), train::logits());
  auto ex = g.template executor<T>(params);
  ex.forward({{"tokens", tokens}, {"target", target}});
  ex.backward();
  out.tensors["loss"] = to_stored(tensor<T>(ex.output(0)));
  out.tensors["logits"] = to_stored(tensor<T>(ex.output(1)));
  for (const auto& name : params.names()) out.tensors["grad." + name] = to_stored(params.grad(name));

  // prefill, then one position a step
  auto step = make_graph(decode::logits());
  auto dec = step.template executor<T>(params, {.inference = true});
  auto cache = nn::kv_cache<T>::template of<decode>(B, T_len);
  const std::int64_t V = ex.output(1).dims[2];
  tensor<T> decoded(dims_t{B, T_len, V});
  for (std::int64_t t0 = 0; t0 < T_len;) {
    const std::int64_t n = t0 == 0 ? prefill : 1;
    tensor<std::int32_t> tok(dims_t{B, n}), pos(dims_t{B, n}), first(dims_t{B});
    for (std::int64_t b = 0; b < B; ++b) {
      first[b] = 0;
      for (std::int64_t t = 0; t < n; ++t) {
        tok[b * n + t] = static_cast<std::int32_t>(tokens[b * T_len + t0 + t]);
        pos[b * n + t] = static_cast<std::int32_t>(t0 + t);
      }
    }
    nn::decode_step(dec, cache, {{"tokens", tok}, {"positions", pos}, {"first", first}});
    const auto got = dec.output();
    for (std::int64_t b = 0; b < B; ++b)
      std::copy(got.data + b * n * V, got.data + (b + 1) * n * V, decoded.data() + (b * T_len + t0) * V);
    t0 += n;
  }
  out.tensors["decode_logits"] = to_stored(decoded);
  write_safetensors(dir + (std::is_same_v<T, double> ? "/loom_f64.safetensors" : "/loom_f32.safetensors"), out);
}

template <nn::decoder_config C>
int refusal(const std::string& dir) {
  auto params = make_graph(nn::decoder_lm<C, nn::train_mode>::loss()).template make_params<double>(0);
  const param_store<double> before = params;
  try {
    nn::load_pretrained(dir + "/checkpoint", C, params);
  } catch (const error& e) {
    std::cout << e.what() << "\n";
    for (const auto& name : params.names()) {
      const auto& a = params.value(name);
      const auto& b = before.value(name);
      if (a.dims() != b.dims() || std::memcmp(a.data(), b.data(), sizeof(double) * static_cast<std::size_t>(a.size())))
        return 4;
    }
    return 3;
  }
  return 0;
}

template <nn::decoder_config C>
int dispatch(bool refuse, const std::string& dir) {
  if (refuse) return refusal<C>(dir);
  run<C, double>(dir);
  run<C, float>(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool refuse = argc == 4 && std::strcmp(argv[1], "--refusal") == 0;
  if (argc != 3 && !refuse) {
    std::cerr << "usage: decoder_parity [--refusal] CONFIG DIR\n";
    return 2;
  }
  const std::string config = argv[refuse ? 2 : 1], dir = argv[refuse ? 3 : 2];
  try {
    if (config == "llama") return dispatch<llama>(refuse, dir);
    if (config == "llama_mqa_tied") return dispatch<llama_mqa_tied>(refuse, dir);
    if (config == "gpt2") return dispatch<gpt2>(refuse, dir);
    std::cerr << "decoder_parity: unknown config " << config << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "decoder_parity: " << e.what() << "\n";
    return 1;
  }
}
