// PyTorch state_dicts in and out of a param_store: names, the separate-projection variant,
// bias-free modules, prefixes, and errors that list every difference and change nothing.
// (Numerical parity with PyTorch itself: scripts/parity.py, the CTest test parity_pytorch.)
#include <catch2/catch.hpp>

#include <algorithm>

#include "loom/loom.hpp"
#include "loom/nn/attention.hpp"
#include "loom/nn/transformer.hpp"
#include "test_support.hpp"

using namespace loom;

namespace {

constexpr long D = 4;
using x = input_node<"x", shape<dyn<"B">, dyn<"T">, fix<D>>>;
const auto attention_graph = make_graph(nn::self_attention<"dec.0.self_attn", 2>(x{}));

/// A tensor whose element i is start + i (distinct values, so misplaced rows show).
stored_tensor counting(std::vector<std::int64_t> shape, double start) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = static_cast<float>(start + static_cast<double>(i));
  return to_stored(tensor<float>(dims_t(std::span<const std::int64_t>(shape)), std::move(v)));
}

/// The state_dict of nn.MultiheadAttention(4, 2) as PyTorch names it (no prefix).
tensor_file mha_state_dict() {
  tensor_file f;
  f.tensors["in_proj_weight"] = counting({3 * D, D}, 0);
  f.tensors["in_proj_bias"] = counting({3 * D}, 100);
  f.tensors["out_proj.weight"] = counting({D, D}, 200);
  f.tensors["out_proj.bias"] = counting({D}, 300);
  return f;
}

bool same_values(const tensor<double>& t, const stored_tensor& s) {
  const auto want = to_tensor<double>(s);
  return t.dims() == want.dims() && std::equal(t.values().begin(), t.values().end(), want.values().begin());
}

}  // namespace

TEST_CASE("a MultiheadAttention state_dict loads under a loom prefix and exports back unchanged") {
  auto params = attention_graph.make_params<double>(1);
  const tensor_file file = mha_state_dict();
  pytorch::load_multihead_attention(file, params, {.loom = "dec.0.self_attn"});
  for (const auto& [name, s] : file.tensors) CHECK(same_values(params.value("dec.0.self_attn." + name), s));

  const tensor_file back = pytorch::export_multihead_attention(params, {.loom = "dec.0.self_attn", .torch = "attn."});
  REQUIRE(back.tensors.size() == 4);
  for (const auto& [name, s] : file.tensors) CHECK(same_values(to_tensor<double>(back.at("attn." + name)), s));
}

TEST_CASE("separate q/k/v projections of [D, D] are the row blocks of in_proj_weight") {
  auto params = attention_graph.make_params<float>(1);
  tensor_file file = mha_state_dict();
  file.tensors.erase("in_proj_weight");
  file.tensors["q_proj_weight"] = counting({D, D}, 0);
  file.tensors["k_proj_weight"] = counting({D, D}, 16);
  file.tensors["v_proj_weight"] = counting({D, D}, 32);
  pytorch::load_multihead_attention(file, params, {.loom = "dec.0.self_attn"});
  const auto& w = params.value("dec.0.self_attn.in_proj_weight");
  for (std::int64_t i = 0; i < w.size(); ++i) CHECK(w[i] == static_cast<float>(i));  // q rows, then k, then v

  const auto back = pytorch::export_multihead_attention(params, {.loom = "dec.0.self_attn"},
                                                        {.layout = pytorch::attention_layout::separate});
  CHECK_FALSE(back.contains("in_proj_weight"));
  CHECK(to_tensor<float>(back.at("k_proj_weight"))[0] == 16.0f);
  CHECK(to_tensor<float>(back.at("v_proj_weight")).dims() == dims_t{D, D});
}

TEST_CASE("separate projections with kdim or vdim different from embed_dim are refused, saying why") {
  auto params = attention_graph.make_params<float>(1);
  tensor_file file = mha_state_dict();
  file.tensors.erase("in_proj_weight");
  file.tensors["q_proj_weight"] = counting({D, D}, 0);
  file.tensors["k_proj_weight"] = counting({D, 6}, 0);  // kdim = 6
  file.tensors["v_proj_weight"] = counting({D, 6}, 0);
  try {
    pytorch::load_multihead_attention(file, params, {.loom = "dec.0.self_attn"});
    FAIL("no exception");
  } catch (const load_mismatch_error& e) {
    REQUIRE(e.differences.size() == 1);
    CHECK_THAT(e.differences[0], Catch::Contains("kdim") && Catch::Contains("[4, 6]"));
  }
}

TEST_CASE("a file that does not match lists every difference and leaves the store unchanged") {
  auto params = attention_graph.make_params<double>(1);
  const param_store<double> before = params;
  tensor_file file = mha_state_dict();
  file.tensors["in_proj_weight"] = counting({3 * D, D + 1}, 0);                   // shape
  file.tensors["in_proj_bias"] = to_stored(tensor<std::int64_t>(dims_t{3 * D}));  // dtype
  file.tensors.erase("out_proj.bias");                                            // missing
  file.tensors["bias_k"] = counting({1, 1, D}, 0);                                // unexpected
  try {
    pytorch::load_multihead_attention(file, params, {.loom = "dec.0.self_attn"});
    FAIL("no exception");
  } catch (const load_mismatch_error& e) {
    INFO(e.what());
    REQUIRE(e.differences.size() == 4);
    const std::string all = e.what();
    CHECK_THAT(all, Catch::Contains("\"in_proj_weight\": shape [12, 5] in the file, [12, 4] in the store"));
    CHECK_THAT(all, Catch::Contains("\"in_proj_bias\": dtype I64"));
    CHECK_THAT(all, Catch::Contains("missing tensor \"out_proj.bias\""));
    CHECK_THAT(all, Catch::Contains("unexpected tensor \"bias_k\"") && Catch::Contains("add_bias_kv"));
  }
  for (const auto& [name, e] : params)
    CHECK(std::equal(e.value.values().begin(), e.value.values().end(), before.value(name).values().begin()));
  CHECK(pytorch::multihead_attention_differences(file, params, {.loom = "dec.0.self_attn"}).size() == 4);
}

TEST_CASE("a bias=False module loads with zero biases, but a file missing only some biases does not load") {
  auto params = attention_graph.make_params<float>(1);
  tensor_file file = mha_state_dict();
  file.tensors.erase("in_proj_bias");
  SECTION("no bias at all: zeros") {
    file.tensors.erase("out_proj.bias");
    pytorch::load_multihead_attention(file, params, {.loom = "dec.0.self_attn"});
    for (float b : params.value("dec.0.self_attn.in_proj_bias").values()) CHECK(b == 0.0f);
    for (float b : params.value("dec.0.self_attn.out_proj.bias").values()) CHECK(b == 0.0f);
    const auto back = pytorch::export_multihead_attention(params, {.loom = "dec.0.self_attn"}, {.biases = false});
    CHECK(back.tensors.size() == 2);
    params.value("dec.0.self_attn.out_proj.bias")[1] = 0.5f;  // trained: no longer bias-free
    CHECK_THROWS_WITH(pytorch::export_multihead_attention(params, {.loom = "dec.0.self_attn"}, {.biases = false}),
                      Catch::Contains("\"dec.0.self_attn.out_proj.bias\""));
  }
  SECTION("one bias missing: a difference") {
    CHECK_THROWS_WITH(pytorch::load_multihead_attention(file, params, {.loom = "dec.0.self_attn"}),
                      Catch::Contains("missing tensor \"in_proj_bias\""));
  }
  SECTION("zero_absent_biases = false: every absent bias is a difference") {
    file.tensors.erase("out_proj.bias");
    CHECK(pytorch::multihead_attention_differences(file, params, {.loom = "dec.0.self_attn"},
                                                   {.zero_absent_biases = false})
              .size() == 2);
  }
}

TEST_CASE("the store must already hold the module's parameters") {
  param_store<float> empty;
  CHECK_THROWS_WITH(pytorch::load_multihead_attention(mha_state_dict(), empty, {.loom = "attn"}),
                    Catch::Contains("the store has no parameter \"attn.in_proj_weight\""));
}

TEST_CASE("a Transformer state_dict under a prefix loads, and tensors outside the prefix are left alone") {
  constexpr nn::transformer_config tiny{.d_model = 8, .heads = 2, .ffn = 12, .encoder_layers = 1, .decoder_layers = 1};
  const auto g = make_graph(nn::transformer_body<tiny, nn::eval_mode>::output());
  auto source = g.make_params<double>(1);
  test::randomize(source, 2);
  tensor_file file = pytorch::export_transformer(source, {.torch = "transformer"});  // the dot is optional
  CHECK(file.contains("transformer.decoder.layers.0.multihead_attn.in_proj_weight"));
  file.tensors["embed.weight"] = counting({5, 8}, 0);  // another module of the model

  auto target = g.make_params<double>(3);
  pytorch::load_transformer(file, target, {.torch = "transformer."});
  for (const auto& [name, e] : source)
    CHECK(std::equal(e.value.values().begin(), e.value.values().end(), target.value(name).values().begin()));

  file.tensors["transformer.encoder.layers.1.norm1.weight"] = counting({8}, 0);  // a layer loom does not have
  CHECK_THROWS_WITH(pytorch::load_transformer(file, target, {.torch = "transformer."}),
                    Catch::Contains("unexpected tensor \"transformer.encoder.layers.1.norm1.weight\""));
  CHECK_NOTHROW(pytorch::load_transformer(file, target, {.torch = "transformer."}, {.strict = false}));
}
