// 16-bit floats (bf16, f16) and Hugging Face checkpoint folders: conversion tables from the
// IEEE 754 and bfloat16 definitions, round trips, sharding, name maps with transposes,
// all-or-nothing loading, config checks and hostile index and config files.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "io_test_support.hpp"
#include "test_support.hpp"
#include "loom/io/hf_checkpoint.hpp"

using namespace loom;
using test::message_of;
using test::scratch_dir;

namespace {


float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }
std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}
std::string read_text(const std::string& path) {
  const auto bytes = test::read_bytes(path);
  return {bytes.begin(), bytes.end()};
}

template <class T>
tensor<T> counting(dims_t dims, double start) {
  tensor<T> t(dims);
  for (std::int64_t i = 0; i < t.size(); ++i) t[i] = static_cast<T>(start + 0.5 * static_cast<double>(i));
  return t;
}

// A GPT-2-like store: an embedding, a Conv1D weight kept as loom's [out, in], a bias.
template <class T>
param_store<T> small_store() {
  param_store<T> p;
  p.set("wte", counting<T>({5, 4}, -3));
  p.set("attn.w", counting<T>({6, 4}, 1));
  p.set("attn.b", counting<T>({6}, 0.25));
  return p;
}
const hf::name_map gpt2_names = {
    {"wte", {"transformer.wte.weight"}},
    {"attn.w", {"transformer.h.0.attn.c_attn.weight", hf::layout::transposed}},
    {"attn.b", {"transformer.h.0.attn.c_attn.bias"}},
};

template <class T>
bool same_values(const param_store<T>& a, const param_store<T>& b) {
  if (a.names() != b.names()) return false;
  for (const auto& name : a.names()) {
    const auto &x = a.value(name), &y = b.value(name);
    if (!(x.dims() == y.dims()) || !std::equal(x.data(), x.data() + x.size(), y.data())) return false;
  }
  return true;
}

// A sharded folder by hand: shards "a.safetensors" {w: [2] F32} and "b.safetensors" {v: [1] F32}.
void sharded_by_hand(const scratch_dir& dir, const std::string& index) {
  test::write_bytes(dir.file("a.safetensors"),
                    test::raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                          test::le_bytes<float>({1, 2})));
  test::write_bytes(dir.file("b.safetensors"),
                    test::raw_safetensors(R"({"v":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                          test::le_bytes<float>({3})));
  write_text(dir.file("model.safetensors.index.json"), index);
}
const std::string good_index = R"({"metadata": {"total_size": 12}, "weight_map": {"w": "a.safetensors", "v": "b.safetensors"}})";

}  // namespace

// ---------------------------------------------------------------- 16-bit floats

TEST_CASE("bf16 from float rounds to nearest even, overflows to infinity and keeps NaN a quiet NaN") {
  struct row {
    std::uint32_t in;
    std::uint16_t out;
  };
  const row table[] = {
      {0x3f800000, 0x3f80},  // 1
      {0xc0000000, 0xc000},  // -2
      {0x80000000, 0x8000},  // -0
      {0x3f808000, 0x3f80},  // 1 + 2^-8: halfway between 0x3f80 and 0x3f81, to the even one
      {0x3f818000, 0x3f82},  // halfway between 0x3f81 and 0x3f82, to the even one
      {0x3f808001, 0x3f81},  // just above halfway
      {0x3f807fff, 0x3f80},  // just below halfway
      {0x3f7fffff, 0x3f80},  // 1 - 2^-24 rounds up across the exponent
      {0x7f7f0000, 0x7f7f},  // the largest finite bf16, (2 - 2^-7) · 2^127
      {0x7f7f7fff, 0x7f7f},  // below halfway to 2^128
      {0x7f7f8000, 0x7f80},  // halfway to 2^128: even is infinity
      {0x7f7fffff, 0x7f80},  // FLT_MAX rounds to infinity
      {0x7f800000, 0x7f80},  // +inf
      {0xff800000, 0xff80},  // -inf
      {0x00010000, 0x0001},  // the smallest bf16 subnormal, 2^-133
      {0x00008000, 0x0000},  // half of it: a tie, to even (zero)
      {0x00018000, 0x0002},  // 1.5 units: a tie, to even
      {0x00000001, 0x0000},  // the smallest float subnormal
      {0x7fc00000, 0x7fc0},  // quiet NaN
      {0xffc00000, 0xffc0},  // negative quiet NaN keeps its sign
      {0x7f800001, 0x7fc0},  // signalling NaN whose payload is only in the low bits: NaN, not inf
      {0x7fa00000, 0x7fe0},  // signalling NaN: made quiet, payload kept
  };
  for (const row& r : table) {
    INFO("float bits 0x" << std::hex << r.in);
    CHECK(bf16_from_float(from_bits(r.in)) == r.out);
  }
}

TEST_CASE("float from bf16 is exact: the bf16 bits followed by 16 zero bits") {
  CHECK(float_from_bf16(0x3f80) == 1.0f);
  CHECK(float_from_bf16(0xc000) == -2.0f);
  CHECK(float_from_bf16(0x7f7f) == 3.3895313892515355e38f);
  CHECK(float_from_bf16(0x0001) == std::ldexp(1.0f, -133));
  CHECK(std::isinf(float_from_bf16(0xff80)));
  CHECK(std::isnan(float_from_bf16(0x7fc1)));
  int wrong = 0;
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = float_from_bf16(static_cast<std::uint16_t>(h));
    if (bits_of(f) != h << 16 || (!std::isnan(f) && bf16_from_float(f) != h))
      if (wrong++ < 5) UNSCOPED_INFO("bf16 0x" << std::hex << h << " does not widen exactly or round trip");
  }
  CHECK(wrong == 0);
}

TEST_CASE("bf16 from float agrees with rounding to nearest even computed in double on a million floats") {
  std::uint32_t state = 12345;
  int wrong = 0;
  for (int i = 0; i < 1'000'000; ++i) {
    state = state * 1664525u + 1013904223u;  // every bit pattern can come up, NaN excluded below
    const float x = from_bits(state);
    if (std::isnan(x)) continue;
    const std::uint32_t down = state & 0xffff0000u, up = down + 0x10000u;
    const double lo = from_bits(down), hi = (up & 0x7fffffffu) == 0x7f800000u
                                                ? std::copysign(std::ldexp(1.0, 128), x)
                                                : static_cast<double>(from_bits(up));
    const double below = std::fabs(static_cast<double>(x) - lo), above = std::fabs(hi - static_cast<double>(x));
    const std::uint32_t want =
        below < above ? down : above < below ? up : ((down >> 16) & 1u) == 0 ? down : up;  // ties to even
    if (std::isinf(x)) continue;  // up would step past infinity
    if (bf16_from_float(x) != want >> 16 && wrong++ < 5) UNSCOPED_INFO("float bits 0x" << std::hex << state);
  }
  CHECK(wrong == 0);
}

TEST_CASE("f16 from float rounds to nearest even, to subnormals, to infinity from 65520, and keeps NaN quiet") {
  struct row {
    float in;
    std::uint16_t out;
  };
  const row table[] = {
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {-0.0f, 0x8000},
      {0.1f, 0x2e66},
      {1.0f / 3.0f, 0x3555},
      {1.0f + 0x1p-11f, 0x3c00},         // halfway between 0x3c00 and 0x3c01: to even
      {1.0f + 3 * 0x1p-11f, 0x3c02},     // halfway between 0x3c01 and 0x3c02: to even
      {65504.0f, 0x7bff},                // the largest finite f16
      {65519.996f, 0x7bff},              // below halfway to 65536
      {65520.0f, 0x7c00},                // halfway: even is infinity
      {1e10f, 0x7c00},
      {-1e10f, 0xfc00},
      {0x1p-14f, 0x0400},                // the smallest normal
      {0x1p-14f - 0x1p-24f, 0x03ff},     // the largest subnormal
      {0x1p-24f, 0x0001},                // the smallest subnormal
      {0x1p-25f, 0x0000},                // half of it: a tie, to even (zero)
      {-0x1p-25f, 0x8000},
      {3 * 0x1p-26f, 0x0001},            // 0.75 units
      {3 * 0x1p-25f, 0x0002},            // 1.5 units: a tie, to even
      {5 * 0x1p-25f, 0x0002},            // 2.5 units: a tie, to even
      {0x1p-14f - 0x1p-25f, 0x0400},     // 1023.5 units: a tie, to the even 1024 (the smallest normal)
      {std::numeric_limits<float>::denorm_min(), 0x0000},
      {std::numeric_limits<float>::infinity(), 0x7c00},
      {-std::numeric_limits<float>::infinity(), 0xfc00},
      {from_bits(0x7fc00000), 0x7e00},
      {from_bits(0xffc00000), 0xfe00},
      {from_bits(0x7f800001), 0x7e00},   // signalling NaN, payload only in the low bits: quiet NaN
  };
  for (const row& r : table) {
    INFO("float " << r.in << " (bits 0x" << std::hex << bits_of(r.in) << ")");
    CHECK(f16_from_float(r.in) == r.out);
  }
}

TEST_CASE("float from f16 is exact for normals, subnormals, infinities and NaN") {
  CHECK(float_from_f16(0x3c00) == 1.0f);
  CHECK(float_from_f16(0xc000) == -2.0f);
  CHECK(float_from_f16(0x7bff) == 65504.0f);
  CHECK(float_from_f16(0x3555) == 0.333251953125f);
  CHECK(float_from_f16(0x0400) == 0x1p-14f);
  CHECK(float_from_f16(0x03ff) == 1023 * 0x1p-24f);
  CHECK(float_from_f16(0x0001) == 0x1p-24f);
  CHECK(float_from_f16(0x8001) == -0x1p-24f);
  CHECK(bits_of(float_from_f16(0x8000)) == 0x80000000u);
  CHECK(float_from_f16(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(float_from_f16(0x7e00)));
  CHECK(std::isnan(float_from_f16(0x7c01)));  // a NaN whose payload is its lowest bit
  int wrong = 0;
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = float_from_f16(static_cast<std::uint16_t>(h));
    if (!std::isnan(f) && f16_from_float(f) != h && wrong++ < 5)
      UNSCOPED_INFO("f16 0x" << std::hex << h << " does not round trip");
  }
  CHECK(wrong == 0);
}

#if defined(__x86_64__)
#include <immintrin.h>
namespace {
__attribute__((target("f16c"))) std::uint16_t f16c_round(float x) {
  return static_cast<std::uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float f16c_widen(std::uint16_t h) { return _cvtsh_ss(h); }
}  // namespace

TEST_CASE("f16 conversions agree with the CPU's F16C instructions on every f16 and a million floats") {
  if (!__builtin_cpu_supports("f16c")) {
    WARN("this CPU has no F16C: skipped");
    return;
  }
  int wrong = 0;
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float mine = float_from_f16(half), cpu = f16c_widen(half);
    if ((std::isnan(cpu) ? !std::isnan(mine) : bits_of(mine) != bits_of(cpu)) && wrong++ < 5)
      UNSCOPED_INFO("widening f16 0x" << std::hex << h);
  }
  std::uint32_t state = 777;
  for (int i = 0; i < 1'000'000; ++i) {
    state = state * 1664525u + 1013904223u;
    // mostly magnitudes near f16's range, where the rounding decisions are
    const std::uint32_t u = i % 2 ? state : (state & 0x807fffffu) | ((100u + (state >> 24) % 50u) << 23);
    const float x = from_bits(u);
    if (f16_from_float(x) != f16c_round(x) && wrong++ < 5) UNSCOPED_INFO("narrowing float bits 0x" << std::hex << u);
  }
  CHECK(wrong == 0);
}
#endif

TEMPLATE_TEST_CASE("BF16 and F16 tensors read into float and double exactly, and write rounded once", "", float,
                   double) {
  scratch_dir dir("hf");
  // bf16 0x3f80 0xc0a0 0x0001 0xff80, f16 0x3c00 0xc500 0x0001 0xfc00: 1, -5, the smallest subnormal, -inf
  tensor_file f;
  auto u16 = [](std::initializer_list<std::uint16_t> v) {
    std::vector<std::byte> b(v.size() * 2);
    std::memcpy(b.data(), std::data(v), b.size());
    return b;
  };
  f.tensors["b"] = {storage_type::bf16, {2, 2}, u16({0x3f80, 0xc0a0, 0x0001, 0xff80})};
  f.tensors["h"] = {storage_type::f16, {4}, u16({0x3c00, 0xc500, 0x0001, 0xfc00})};
  write_safetensors(dir.file("half.safetensors"), f);
  const tensor_file back = read_safetensors(dir.file("half.safetensors"));
  CHECK(back.at("b").type == storage_type::bf16);
  CHECK(back.at("h").type == storage_type::f16);
  const tensor<TestType> b = to_tensor<TestType>(back.at("b")), h = to_tensor<TestType>(back.at("h"));
  CHECK(b[0] == 1);
  CHECK(b[1] == -5);
  CHECK(b[2] == static_cast<TestType>(std::ldexp(1.0, -133)));
  CHECK(b[3] == -std::numeric_limits<TestType>::infinity());
  CHECK(h[0] == 1);
  CHECK(h[1] == -5);
  CHECK(h[2] == static_cast<TestType>(std::ldexp(1.0, -24)));
  CHECK(h[3] == -std::numeric_limits<TestType>::infinity());
  CHECK(first_non_finite(back.at("b")) == 3);
  CHECK(first_non_finite(back.at("h")) == 3);
  CHECK(non_finite_text("h", back.at("h"), 3) == "\"h\" holds -infinity at element 3 of [4]");

  // Writing: 1 + 2^-8 is a tie (to 1.0); a double just above it must round up, not through float.
  const double just_above = 1.0 + 0x1p-8 + 0x1p-40;
  const stored_tensor s = to_stored(tensor<TestType>({2}, {TestType(1.0 + 0x1p-8), TestType(just_above)}),
                                    storage_type::bf16);
  std::uint16_t out[2];
  std::memcpy(out, s.bytes.data(), 4);
  CHECK(out[0] == 0x3f80);
  CHECK(out[1] == (std::is_same_v<TestType, double> ? 0x3f81 : 0x3f80));  // a float holds only the tie
  CHECK_THROWS_AS(to_stored(tensor<TestType>({1}), storage_type::i32), value_error);
}

TEST_CASE("a BF16 tensor holding NaN does not load unless allowed") {
  scratch_dir dir("hf");
  tensor_file f;
  f.tensors["w"] = {storage_type::bf16, {2}, {std::byte{0x80}, std::byte{0x3f}, std::byte{0xc0}, std::byte{0x7f}}};
  write_safetensors(dir.file("nan.safetensors"), f);
  param_store<float> p;
  p.set("w", tensor<float>({2}, {5, 5}));
  CHECK_THAT(message_of([&] { load_safetensors(dir.file("nan.safetensors"), p); }),
             Catch::Contains("\"w\" holds NaN at element 1 of [2]"));
  CHECK(p.value("w")[0] == 5);
  load_safetensors(dir.file("nan.safetensors"), p, {.allow_non_finite = true});
  CHECK(p.value("w")[0] == 1);
  CHECK(std::isnan(p.value("w")[1]));
}

// ---------------------------------------------------------------- config.json

TEST_CASE("config.json reads flat: scalars by kind and nested values as compact text") {
  const hf::model_config c = hf::parse_config(R"({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "rms_norm_eps": 1e-05,
    "tie_word_embeddings": false, "hidden_act": "silu", "rope_scaling": {"factor": 8.0, "type": "llama3"},
    "bos_token_id": null, "vocab_size": 128256, "note": "caf\u00e9 \"q\""})");
  CHECK(c.fields.size() == 9);
  CHECK(c.integer("hidden_size") == 4096);
  CHECK(c.number("hidden_size") == 4096.0);
  CHECK(c.number("rms_norm_eps") == 1e-5);
  CHECK_FALSE(c.boolean("tie_word_embeddings"));
  CHECK(c.string("hidden_act") == "silu");
  CHECK(c.string("note") == "café \"q\"");
  CHECK(c.fields.at("architectures").type == hf::json_field::kind::array);
  CHECK(c.fields.at("architectures").text == R"(["LlamaForCausalLM"])");
  CHECK(c.fields.at("rope_scaling").text == R"({"factor":8.0,"type":"llama3"})");
  CHECK(c.fields.at("bos_token_id").type == hf::json_field::kind::null);
  CHECK_THAT(message_of([&] { (void)c.integer("rms_norm_eps"); }),
             Catch::Contains("field \"rms_norm_eps\" is 1e-05, not an integer"));
  CHECK_THAT(message_of([&] { (void)c.string("hidden_size"); }), Catch::Contains("\"hidden_size\" is 4096, not a string"));
  CHECK_THROWS_AS(c.integer("num_heads"), missing_error);
}

TEST_CASE("a config that differs from the model is one error naming each field and both values") {
  const hf::model_config c =
      hf::parse_config(R"({"num_key_value_heads": 4, "rms_norm_eps": 1e-05, "hidden_act": "silu", "tie": true})");
  CHECK(hf::config_differences(c, {{"num_key_value_heads", "4.0"}, {"rms_norm_eps", "1e-5"}, {"hidden_act", "\"silu\""},
                                   {"tie", "true"}})
            .empty());
  const std::string one = message_of([&] { hf::check_config(c, {{"num_key_value_heads", "2"}}); });
  CHECK(one == "config.json does not match the model: num_key_value_heads: file 4, model 2");
  try {
    hf::check_config(c, {{"num_key_value_heads", "2"}, {"rope_theta", "10000.0"}, {"hidden_act", "\"gelu\""}});
    FAIL("no error");
  } catch (const load_mismatch_error& e) {
    CHECK(e.differences == std::vector<std::string>{"hidden_act: file \"silu\", model \"gelu\"",
                                                    "num_key_value_heads: file 4, model 2",
                                                    "rope_theta: not in the file (model 10000.0)"});
    CHECK_THAT(std::string(e.what()), Catch::Contains("(3 fields):"));
  }
  CHECK_THROWS_AS(hf::config_differences(c, {{"tie", "yes"}}), value_error);
}

TEST_CASE("hostile config files are io_errors: not an object, deep nesting, a field twice, too many fields, cut short") {
  const std::string deep = "{\"a\":" + std::string(100'000, '[') + std::string(100'000, ']') + "}";
  std::string many = "{";
  for (std::size_t i = 0; i <= hf::max_json_fields; ++i) many += (i ? ",\"f" : "\"f") + std::to_string(i) + "\":0";
  many += "}";
  const std::pair<std::string, std::string> cases[] = {
      {"[1, 2]", "not a JSON object"},
      {"3", "not a JSON object"},
      {"", "not valid JSON"},
      {R"({"a": 1, "a": 2})", "field \"a\" is given twice"},
      {deep, "field \"a\" nests deeper than 64 levels"},
      {many, "more than 100000 fields"},
      {R"({"a": [1, 2)", "not valid JSON"},
      {R"({"a": 1} {"b": 2})", "not valid JSON"},
      {"{\"a\": \"\xff\"}", "not valid JSON"},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text.substr(0, 60));
    CHECK_THAT(message_of([&] { hf::parse_config(text, "cfg"); }), Catch::StartsWith("cfg: ") && Catch::Contains(expected));
    CHECK_THROWS_AS(hf::parse_config(text), io_error);
  }
  // 63 levels below the top object are fine
  CHECK(hf::parse_config("{\"a\":" + std::string(63, '[') + std::string(63, ']') + "}").fields.at("a").text.size() == 126);
}

// ---------------------------------------------------------------- the index

TEST_CASE("an index names each tensor's shard, its files are listed once, in order") {
  const hf::weight_index i = hf::parse_index(
      R"({"metadata": {"total_size": 12, "note": {"x": [1]}}, "weight_map": {"w": "b.safetensors", "v": "a.safetensors",
          "u": "b.safetensors"}, "extra": [[{"ignored": true}]]})");
  CHECK(i.sharded);
  CHECK(i.files == std::vector<std::string>{"a.safetensors", "b.safetensors"});
  CHECK(i.weight_map.at("w") == "b.safetensors");
  CHECK(i.metadata.at("total_size").text == "12");
  CHECK(i.metadata.at("note").text == R"({"x":[1]})");
}

TEST_CASE("hostile index files are io_errors: path traversal, wrong kinds, names twice, depth, counts") {
  std::string many_files = R"({"weight_map": {)";
  for (std::size_t k = 0; k <= hf::max_shards; ++k)
    many_files += (k ? ",\"t" : "\"t") + std::to_string(k) + "\":\"s" + std::to_string(k) + ".safetensors\"";
  many_files += "}}";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"weight_map": {"w": "../x.safetensors"}})", "is not a plain file name"},
      {R"({"weight_map": {"w": "/etc/x.safetensors"}})", "is not a plain file name"},
      {R"({"weight_map": {"w": "sub/x.safetensors"}})", "is not a plain file name"},
      {R"({"weight_map": {"w": "..\\x.safetensors"}})", "is not a plain file name"},
      {R"({"weight_map": {"w": ".."}})", "is not a file name"},
      {R"({"weight_map": {"w": ""}})", "is empty"},
      {R"({"weight_map": {"w": "x.bin"}})", "does not end in .safetensors"},
      {R"({"weight_map": {"w": "a\u0000.safetensors"}})", "is not a plain file name"},
      {R"({"weight_map": {"w": 3}})", "weight_map \"w\" is 3, not a file name"},
      {R"({"weight_map": {"w": ["a.safetensors"]}})", "is an array, not a file name"},
      {R"({"weight_map": {"w": "a.safetensors", "w": "a.safetensors"}})", "names \"w\" twice"},
      {R"({"weight_map": {}, "weight_map": {}})", "\"weight_map\" is given twice"},
      {R"({"weight_map": []})", "\"weight_map\" is an array, not a JSON object"},
      {R"({"metadata": {}})", "no \"weight_map\" object"},
      {R"({"metadata": 3, "weight_map": {}})", "\"metadata\" is 3, not a JSON object"},
      {R"({"metadata": {"a": 1, "a": 2}, "weight_map": {}})", "field \"a\" is given twice"},
      {"{\"metadata\": {\"a\":" + std::string(100'000, '[') + "}", "nests deeper than 64 levels"},
      {"{\"other\":" + std::string(100'000, '[') + "}", "nests deeper than 64 levels"},
      {many_files, "more than 100000 files"},
      {R"({"weight_map": {"w": "a.safetensors")", "not valid JSON"},
      {"[]", "not a JSON object"},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text.substr(0, 80));
    CHECK_THAT(message_of([&] { hf::parse_index(text, "idx"); }), Catch::StartsWith("idx: ") && Catch::Contains(expected));
  }
  // names from the file are cut short in messages
  const std::string long_name = R"({"weight_map": {")" + std::string(1'000'000, 'n') + R"(": 3}})";
  CHECK(message_of([&] { hf::parse_index(long_name); }).size() < 1100);
}

TEST_CASE("a sharded folder by hand reads whole, an index and shards that disagree are refused, listing the names") {
  scratch_dir dir("hf");
  sharded_by_hand(dir, good_index);
  const tensor_file all = hf::read_tensors(dir.path().string());
  CHECK(all.tensors.size() == 2);
  CHECK(to_tensor<float>(all.at("v"))[0] == 3);

  sharded_by_hand(dir, R"({"weight_map": {"w": "a.safetensors", "v": "b.safetensors", "u": "b.safetensors"}})");
  CHECK_THAT(message_of([&] { hf::read_tensors(dir.path().string()); }),
             Catch::Contains("shard \"b.safetensors\" lacks 1 tensors that model.safetensors.index.json puts there: \"u\""));
  test::write_bytes(dir.file("c.safetensors"),
                    test::raw_safetensors(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                          R"("y":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                          {1, 2}));
  sharded_by_hand(dir, R"({"weight_map": {"w": "a.safetensors", "v": "b.safetensors", "x": "c.safetensors"}})");
  CHECK_THAT(message_of([&] { hf::read_tensors(dir.path().string()); }),
             Catch::Contains("shard \"c.safetensors\" holds 1 tensors that model.safetensors.index.json does not "
                             "put there: \"y\""));
  sharded_by_hand(dir, R"({"weight_map": {"w": "a.safetensors"}})");  // b is not part of the checkpoint
  CHECK(hf::read_tensors(dir.path().string()).tensors.size() == 1);
  sharded_by_hand(dir, R"({"weight_map": {"w": "a.safetensors", "v": "a.safetensors"}})");
  CHECK_THAT(message_of([&] { hf::read_tensors(dir.path().string()); }),
             Catch::Contains("shard \"a.safetensors\" lacks 1 tensors") && Catch::Contains("\"v\""));
  sharded_by_hand(dir, R"({"weight_map": {"w": "a.safetensors", "v": "d.safetensors"}})");
  CHECK_THAT(message_of([&] { hf::read_tensors(dir.path().string()); }),
             Catch::Contains("cannot open") && Catch::Contains("d.safetensors"));

  sharded_by_hand(dir, good_index);  // the shard cut short
  auto bytes = test::read_bytes(dir.file("b.safetensors"));
  REQUIRE(!bytes.empty());
  bytes.pop_back();
  test::write_bytes(dir.file("b.safetensors"), bytes);
  CHECK_THROWS_AS(hf::read_tensors(dir.path().string()), io_error);
}

TEST_CASE("a folder with both layouts or neither is refused, an index over 64 MiB is refused unread") {
  scratch_dir dir("hf");
  sharded_by_hand(dir, good_index);
  test::write_bytes(dir.file("model.safetensors"), test::raw_safetensors("{}"));
  CHECK_THAT(message_of([&] { hf::read_index(dir.path().string()); }), Catch::Contains("holds both"));
  std::filesystem::remove(dir.file("model.safetensors"));
  std::filesystem::remove(dir.file("model.safetensors.index.json"));
  CHECK_THAT(message_of([&] { hf::read_index(dir.path().string()); }), Catch::Contains("holds neither"));
  CHECK_THAT(message_of([&] { hf::read_config(dir.path().string()); }), Catch::Contains("cannot open"));

  const std::string big = dir.file("model.safetensors.index.json");
  test::write_bytes(big, {'{'});
  REQUIRE(::truncate(big.c_str(), static_cast<off_t>(hf::max_json_bytes + 1)) == 0);  // sparse
  CHECK_THAT(message_of([&] { hf::read_index(dir.path().string()); }),
             Catch::Contains("has 67108865 bytes, more than the limit of 67108864"));
}

// ---------------------------------------------------------------- saving and loading

TEMPLATE_TEST_CASE("a folder saved as one file loads back bit for bit, with its config", "", float, double) {
  scratch_dir dir("hf");
  const std::string folder = dir.file("gpt2");
  const auto params = small_store<TestType>();
  hf::save(folder, params, gpt2_names, {{"model_type", "\"gpt2\""}, {"n_embd", "4"}, {"layer_norm_epsilon", "1e-05"}});
  CHECK(std::filesystem::exists(folder + "/model.safetensors"));
  CHECK_FALSE(std::filesystem::exists(folder + "/model.safetensors.index.json"));
  CHECK(read_text(folder + "/config.json") ==
        "{\n  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n  \"n_embd\": 4\n}\n");
  const hf::model_config config = hf::read_config(folder);
  hf::check_config(config, {{"n_embd", "4"}, {"layer_norm_epsilon", "1e-5"}});

  const tensor_file file = read_safetensors(folder + "/model.safetensors");
  CHECK(file.metadata == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(file.at("transformer.h.0.attn.c_attn.weight").shape == std::vector<std::int64_t>{4, 6});  // Conv1D [in, out]
  // element [i, o] of the stored weight is element [o, i] of loom's: 1 + 0.5 · (4 o + i)
  const tensor<TestType> stored = to_tensor<TestType>(file.at("transformer.h.0.attn.c_attn.weight"));
  CHECK(stored[0 * 6 + 1] == TestType(3));    // [i 0, o 1] = loom [1, 0] = 1 + 0.5 · 4
  CHECK(stored[3 * 6 + 5] == TestType(12.5));  // [i 3, o 5] = loom [5, 3] = 1 + 0.5 · 23

  param_store<TestType> loaded = small_store<TestType>();
  for (auto& [name, e] : loaded) e.value.fill(TestType(0));
  hf::load(folder, loaded, gpt2_names);
  CHECK(same_values(loaded, params));
}

TEMPLATE_TEST_CASE("a sharded save has HF's file names and index, and loads like the single file", "", float,
                   double) {
  scratch_dir dir("hf");
  const auto params = small_store<TestType>();  // 80 + 96 + 24 bytes as F32 (wte, attn.w, attn.b)
  hf::save(dir.file("one"), params, gpt2_names, {});
  hf::save(dir.file("shards"), params, gpt2_names, {}, {.max_shard_bytes = 100});
  const std::string folder = dir.file("shards");
  // name order: h.0.attn.c_attn.bias (24), h.0.attn.c_attn.weight (96) -> a new shard, wte (80) -> another
  const hf::weight_index index = hf::read_index(folder);
  CHECK(index.sharded);
  CHECK(index.files == std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                               "model-00003-of-00003.safetensors"});
  CHECK(index.weight_map.at("transformer.wte.weight") == "model-00003-of-00003.safetensors");
  CHECK(index.metadata.at("total_size").text == "200");
  CHECK_FALSE(std::filesystem::exists(folder + "/model.safetensors"));

  const tensor_file one = hf::read_tensors(dir.file("one")), sharded = hf::read_tensors(folder);
  REQUIRE(one.tensors.size() == sharded.tensors.size());
  for (const auto& [name, s] : one.tensors) {
    CHECK(sharded.at(name).shape == s.shape);
    CHECK(sharded.at(name).bytes == s.bytes);
  }
  param_store<TestType> loaded = small_store<TestType>();
  for (auto& [name, e] : loaded) e.value.fill(TestType(0));
  hf::load(folder, loaded, gpt2_names);
  CHECK(same_values(loaded, params));

  // Saving the other layout over it removes the stale files, so the folder is never ambiguous.
  hf::save(folder, params, gpt2_names, {});
  CHECK_FALSE(std::filesystem::exists(folder + "/model.safetensors.index.json"));
  CHECK_FALSE(std::filesystem::exists(folder + "/model-00001-of-00003.safetensors"));
  hf::save(folder, params, gpt2_names, {}, {.max_shard_bytes = 150});
  CHECK_FALSE(std::filesystem::exists(folder + "/model.safetensors"));
  CHECK(hf::read_index(folder).files.size() == 2);
}

TEST_CASE("a BF16 save rounds each value once to nearest even and loads back as the rounded values") {
  scratch_dir dir("hf");
  param_store<float> p;
  // 1 + 2^-8 ties to 1; 1 + 3 · 2^-8 ties to 1 + 2^-6 (0x3f82); 1/3 = 0x3eaaaaab rounds to 0x3eab
  p.set("w", tensor<float>({3}, {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f / 3.0f}));
  hf::save(dir.file("m"), p, hf::same_names(p), {}, {.dtype = storage_type::bf16});
  const stored_tensor s = hf::read_tensors(dir.file("m")).at("w");
  CHECK(s.type == storage_type::bf16);
  std::uint16_t bits[3];
  std::memcpy(bits, s.bytes.data(), 6);
  CHECK(bits[0] == 0x3f80);
  CHECK(bits[1] == 0x3f82);
  CHECK(bits[2] == 0x3eab);
  param_store<double> q;
  q.set("w", tensor<double>({3}));
  hf::load(dir.file("m"), q, hf::same_names(q));
  CHECK(q.value("w")[1] == 1.0 + 0x1p-6);
  CHECK(q.value("w")[2] == 0.333984375);  // 0x3eab: (1 + 43/128) / 4
}

TEST_CASE("a load that does not fit lists every missing, mis-shaped and unexpected tensor and changes nothing") {
  scratch_dir dir("hf");
  const std::string folder = dir.file("m");
  param_store<float> saved = small_store<float>();
  saved.set("extra", tensor<float>({1}, {7}));
  hf::name_map names = gpt2_names;
  names["extra"] = {"lm_head.weight"};
  hf::save(folder, saved, names, {});

  param_store<float> p = small_store<float>();
  p.set("attn.b", tensor<float>({5}));       // the file's bias has 6
  p.set("ln.weight", tensor<float>({4}));    // not in the file
  const param_store<float> before = p;
  hf::name_map wanted = gpt2_names;
  wanted["ln.weight"] = {"transformer.ln_f.weight"};
  wanted["ghost"] = {"transformer.wte.weight"};  // no such parameter
  try {
    hf::load(folder, p, wanted);
    FAIL("no error");
  } catch (const load_mismatch_error& e) {
    INFO(e.what());
    CHECK(e.differences.size() == 4);
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("(4 differences; nothing was loaded)"));
    CHECK_THAT(what, Catch::Contains("the mapping names parameter \"ghost\", which the store does not have"));
    CHECK_THAT(what, Catch::Contains("\"transformer.h.0.attn.c_attn.bias\": shape [6] in the file, expected [5] "
                                     "(parameter \"attn.b\" [5])"));
    CHECK_THAT(what, Catch::Contains("missing tensor \"transformer.ln_f.weight\" (parameter \"ln.weight\" [4])"));
    CHECK_THAT(what, Catch::Contains("unexpected tensor \"lm_head.weight\" [1]: no parameter reads it"));
  }
  CHECK(same_values(p, before));

  // A transposed mapping checks the transposed shape; a parameter outside the mapping is named.
  param_store<float> q = small_store<float>();
  hf::name_map straight = gpt2_names;
  straight["attn.w"].transform = hf::layout::same;
  straight.erase("wte");
  CHECK_THAT(message_of([&] { hf::load(folder, q, straight, {.strict = false}); }),
             Catch::Contains("\"transformer.h.0.attn.c_attn.weight\": shape [4, 6] in the file, expected [6, 4]") &&
                 Catch::Contains("parameter \"wte\" is not in the mapping"));
  CHECK(same_values(q, small_store<float>()));
  // strict = false ignores the tensors no parameter reads
  hf::load(folder, q, gpt2_names, {.strict = false});
  CHECK(same_values(q, small_store<float>()));
}

TEST_CASE("a non-floating tensor and a NaN are differences, a message of many differences stays short") {
  scratch_dir dir("hf");
  const std::string folder = dir.file("m");
  std::filesystem::create_directories(folder);
  std::string header = "{";
  std::vector<char> data;
  for (int i = 0; i < 200; ++i) {
    header += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"I32","shape":[1],"data_offsets":[)" +
              std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
    data.insert(data.end(), 4, 0);
  }
  test::write_bytes(folder + "/model.safetensors", test::raw_safetensors(header + "}", data));
  param_store<float> p;
  for (int i = 0; i < 200; ++i) p.set("t" + std::to_string(i), tensor<float>({1}));
  try {
    hf::load(folder, p, hf::same_names(p));
    FAIL("no error");
  } catch (const load_mismatch_error& e) {
    CHECK(e.differences.size() == 200);
    CHECK_THAT(e.differences[0], Catch::Contains("\"t0\": dtype I32 in the file, expected F32, F64, F16 or BF16"));
    CHECK_THAT(std::string(e.what()), Catch::EndsWith("... and 150 more"));
    CHECK(std::string(e.what()).size() < 10'000);
  }
}

TEST_CASE("save refuses a bad mapping, config or dtype before writing anything") {
  scratch_dir dir("hf");
  const std::string folder = dir.file("m");
  const auto p = small_store<float>();
  hf::name_map partial = gpt2_names;
  partial.erase("wte");
  hf::name_map twice = gpt2_names;
  twice["attn.b"].name = "transformer.wte.weight";
  hf::name_map flat_transposed = gpt2_names;
  flat_transposed["attn.b"].transform = hf::layout::transposed;
  CHECK_THAT(message_of([&] { hf::save(folder, p, partial, {}); }), Catch::Contains("not in the mapping: \"wte\""));
  CHECK_THAT(message_of([&] { hf::save(folder, p, twice, {}); }),
             Catch::Contains("two parameters map to \"transformer.wte.weight\""));
  CHECK_THAT(message_of([&] { hf::save(folder, p, flat_transposed, {}); }), Catch::Contains("which needs 2 dims"));
  CHECK_THAT(message_of([&] { hf::save(folder, p, gpt2_names, {{"n", "4, \"m\": 5"}}); }),
             Catch::Contains("config field \"n\" is not one JSON value"));
  CHECK_THAT(message_of([&] { hf::save(folder, p, gpt2_names, {{"n", "[1"}}); }),
             Catch::Contains("config field \"n\" is not one JSON value"));
  CHECK_THROWS_AS(hf::save(folder, p, gpt2_names, {}, {.dtype = storage_type::i32}), value_error);
  CHECK_FALSE(std::filesystem::exists(folder));
}
