// The C++ half of the PyTorch parity test (scripts/parity.py drives it).
//
//   parity_runner --list          prints the names of the cases it knows, one a line
//   parity_runner --keys          prints "case hash" for each case with a dropout node: the node's
//                                 structural hash, which keys its random stream (the script draws
//                                 the same mask from it with dropout's documented formula)
//   parity_runner DIR [case...]   runs the cases (default: all), in double and in float
//
// For a case C, the script has written DIR/C/weights.safetensors (the module's state_dict)
// and DIR/C/inputs.safetensors (the loom graph's inputs in loom's batch-first layout, plus
// `cotangent` W). The runner loads the weights with loom's PyTorch importer, runs forward,
// then backward from W (the gradient of L = Σ out ⊙ W), and writes DIR/C/loom_f64.safetensors
// and loom_f32.safetensors holding `out`, `grad.input.<name>`, `grad.param.<PyTorch name>` and
// `weights.<PyTorch name>` (the loaded weights exported back). Decoding cases write no gradients.
#include <cstring>
#include <iostream>
#include <map>
#include <set>

#include "loom/loom.hpp"
#include "loom/nn/kv_cache.hpp"
#include "parity_support.hpp"

using namespace loom;

namespace parity {

namespace {

bool is_input(const plan_view& plan, std::string_view name) {
  for (const node_desc* d : plan.order)
    if (d->op->role == node_role::input && d->name == name) return true;
  return false;
}

/// The inputs of a case: real tensors (F32/F64) converted to T, ints and bools as they are.
template <class T>
struct case_inputs {
  std::map<std::string, tensor<T>> real;
  std::map<std::string, tensor<std::int32_t>> ints;
  std::map<std::string, tensor<std::int64_t>> longs;  // PyTorch's default for ids and lengths
  std::map<std::string, tensor<std::uint8_t>> bools;
  tensor<T> cotangent;

  explicit case_inputs(const std::string& path) {
    const tensor_file file = read_safetensors(path);
    for (const auto& [name, s] : file.tensors) {
      if (name == "cotangent")
        cotangent = to_tensor<T>(s);
      else if (is_floating(s.type))
        real.emplace(name, to_tensor<T>(s));
      else if (s.type == storage_type::i32)
        ints.emplace(name, to_tensor<std::int32_t>(s));
      else if (s.type == storage_type::i64)
        longs.emplace(name, to_tensor<std::int64_t>(s));
      else
        bools.emplace(name, to_tensor<std::uint8_t>(s));
    }
  }
  /// Feeds (borrowed) for those of the inputs that `plan` takes.
  std::vector<feed> feeds(const plan_view& plan) const {
    std::vector<feed> f;
    for (const auto& [name, t] : real)
      if (is_input(plan, name)) f.emplace_back(name, t);
    for (const auto& [name, t] : ints)
      if (is_input(plan, name)) f.emplace_back(name, t);
    for (const auto& [name, t] : longs)
      if (is_input(plan, name)) f.emplace_back(name, t);
    for (const auto& [name, t] : bools)
      if (is_input(plan, name)) f.emplace_back(name, t);
    return f;
  }
};

template <class T>
void load(const gradient_case& c, const std::string& path, param_store<T>& params) {
  if (c.kind == module::multihead_attention)
    pytorch::load_multihead_attention(path, params, c.names);
  else if (c.kind == module::transformer)
    pytorch::load_transformer(path, params, c.names);
}

template <class T>
tensor_file export_back(const gradient_case& c, const param_store<T>& params, pytorch::export_options options) {
  if (c.kind == module::multihead_attention) return pytorch::export_multihead_attention(params, c.names, options);
  if (c.kind == module::transformer) return pytorch::export_transformer(params, c.names, options);
  return {};
}

void add_prefixed(tensor_file& out, const std::string& prefix, const tensor_file& from) {
  for (const auto& [name, t] : from.tensors) out.tensors[prefix + name] = t;
}

template <class T>
void run(const gradient_case& c, const std::string& dir, const char* suffix) {
  param_store<T> params;
  init_params(c.plan, params, 0);
  load(c, dir + "/weights.safetensors", params);
  const case_inputs<T> in(dir + "/inputs.safetensors");
  executor<T> ex(c.plan, params, {.input_grads = true});
  ex.forward(in.feeds(c.plan));
  ex.backward(std::span<const tensor<T>>(&in.cotangent, 1));

  tensor_file out;
  out.tensors["out"] = to_stored(tensor<T>(ex.output()));
  for (const auto& [name, t] : in.real)
    if (is_input(c.plan, name)) out.tensors["grad.input." + name] = to_stored(tensor<T>(ex.input_grad(name)));
  param_store<T> grads;
  for (const auto& [name, e] : params) grads.set(name, e.grad);
  pytorch::export_options all = c.back;
  all.biases = true;  // a bias=False module has no bias gradients in PyTorch; the script ignores loom's
  add_prefixed(out, "grad.param.", export_back(c, grads, all));
  add_prefixed(out, "weights.", export_back(c, params, c.back));
  write_safetensors(dir + "/loom_" + suffix + ".safetensors", out);
}

/// [B, T, D] rows t0 .. t0 + n of x.
template <class T>
tensor<T> rows(const tensor<T>& x, std::int64_t t0, std::int64_t n) {
  const std::int64_t B = x.dim(0), T_ = x.dim(1), D = x.dim(2);
  tensor<T> r(dims_t{B, n, D});
  for (std::int64_t b = 0; b < B; ++b)
    std::copy(x.data() + (b * T_ + t0) * D, x.data() + (b * T_ + t0 + n) * D, r.data() + b * n * D);
  return r;
}

template <class T>
void run(const decode_case& c, const std::string& dir, const char* suffix) {
  param_store<T> params;
  init_params(c.memory, params, 0);  // the encoder's parameters
  init_params(c.step, params, 0);    // the decoder's
  pytorch::load_transformer(dir + "/weights.safetensors", params, c.names);
  const case_inputs<T> in(dir + "/inputs.safetensors");

  // The encoder runs once; each decoder layer's cross-attention memory is projected once.
  executor<T> encode(c.memory, params, {.inference = true});
  encode.forward(in.feeds(c.memory));
  const std::vector<feed> projected = encode.named_feeds();  // the step's memory inputs, by name

  const tensor<T>& tgt = in.real.at("tgt_x");
  const std::int64_t B = tgt.dim(0), T_ = tgt.dim(1), D = tgt.dim(2);
  nn::kv_cache<T> cache(c.step, B, T_);
  executor<T> step(c.step, params, {.inference = true});
  tensor<T> out(dims_t{B, T_, D});
  for (std::int64_t t0 = 0; t0 < T_;) {
    const std::int64_t n = t0 == 0 ? c.prefill : 1;  // a prefill, then one token at a time
    std::vector<feed> feeds(projected);
    feeds.emplace_back("tgt_x", rows(tgt, t0, n));
    if (in.longs.contains("src_len")) feeds.emplace_back("src_len", in.longs.at("src_len"));
    else feeds.emplace_back("src_len", in.ints.at("src_len"));
    nn::decode_step(step, cache, feeds);
    auto y = step.output();
    for (std::int64_t b = 0; b < B; ++b)
      std::copy(y.data + b * n * D, y.data + (b + 1) * n * D, out.data() + (b * T_ + t0) * D);
    t0 += n;
  }
  tensor_file file;
  file.tensors["out"] = to_stored(out);
  add_prefixed(file, "weights.", pytorch::export_transformer(params, c.names));
  write_safetensors(dir + "/loom_" + suffix + ".safetensors", file);
}

}  // namespace

}  // namespace parity

int main(int argc, char** argv) {
  using namespace parity;
  const auto gradient = [] {
    auto a = attention_cases();
    auto t = transformer_cases();
    auto s = sdpa_cases();
    a.insert(a.end(), t.begin(), t.end());
    a.insert(a.end(), s.begin(), s.end());
    return a;
  }();
  const auto decoding = decode_cases();
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const auto& c : gradient) std::cout << c.name << "\n";
    for (const auto& c : decoding) std::cout << c.name << "\n";
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--keys") == 0) {
    for (const auto& c : gradient)
      for (const node_desc* d : c.plan.order)
        if (d->op->name == "dropout") std::cout << c.name << " " << d->hash << "\n";
    return 0;
  }
  if (argc < 2) {
    std::cerr << "usage: parity_runner --list | --keys | DIR [case...]\n";
    return 2;
  }
  const std::string dir = argv[1];
  const std::set<std::string> wanted(argv + 2, argv + argc);
  std::set<std::string> unknown = wanted;
  int failures = 0;
  auto attempt = [&](const std::string& name, auto&& body) {
    if (!wanted.empty() && !wanted.contains(name)) return;
    unknown.erase(name);
    try {
      body(dir + "/" + name);
    } catch (const std::exception& e) {
      std::cerr << name << ": " << e.what() << "\n";
      ++failures;
    }
  };
  for (const auto& c : gradient)
    attempt(c.name, [&](const std::string& d) {
      run<double>(c, d, "f64");
      run<float>(c, d, "f32");
    });
  for (const auto& c : decoding)
    attempt(c.name, [&](const std::string& d) {
      run<double>(c, d, "f64");
      run<float>(c, d, "f32");
    });
  for (const auto& name : unknown) {
    std::cerr << "parity_runner: no case named \"" << name << "\"\n";
    ++failures;
  }
  return failures ? 1 : 0;
}
