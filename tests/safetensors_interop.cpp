// The C++ half of the PyTorch interoperability test (scripts/safetensors_check.py drives it).
//   safetensors_interop write <dir>   writes from_loom_f32/_f64/_bf16/_f16.safetensors and from_loom_ckpt.safetensors
//   safetensors_interop check <dir>   loads from_torch.safetensors and compares it with the expected values,
//                                     and loom's bf16 and f16 conversions with torch's
// Both sides compute the same values from one formula (see expected_value), so every comparison
// is bit for bit. Exit status 0 when everything matches.
#include <cmath>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "loom/io/checkpoint.hpp"
#include "loom/io/safetensors.hpp"
#include "loom/train/optim.hpp"

using namespace loom;

namespace {

struct spec {
  const char* name;
  dims_t dims;
};
// The same list, in the same order, as TENSORS in scripts/safetensors_check.py.
const std::vector<spec> specs = {
    {"encoder.layers.0.self_attn.in_proj_weight", {6, 4}},
    {"encoder.layers.0.self_attn.in_proj_bias", {6}},
    {"decoder.norm.weight", {4}},
    {"scalar", {}},
    {"special", {6}},
    {"empty", {0, 3}},
};

// Element i of tensor number t, as a double; each side casts it to the file's dtype.
double expected_value(std::size_t t, std::int64_t i) {
  if (std::string(specs[t].name) == "special") {
    const double special[] = {0.0, -0.0, 1e-30, 3.4e38, -1.0 / 3.0, 1e-45};
    return special[i];
  }
  return static_cast<double>((i * 37 + static_cast<std::int64_t>(t) * 11) % 101 - 50) / 7.0;
}

template <class T>
param_store<T> expected_store() {
  param_store<T> p;
  for (std::size_t t = 0; t < specs.size(); ++t) {
    tensor<T> v(specs[t].dims);
    for (std::int64_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(expected_value(t, i));
    p.set(specs[t].name, std::move(v));
  }
  return p;
}

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "MISMATCH: " << what << "\n";
    ++failures;
  }
}

// Loads the torch file into a store of T; `as_written` gives the value torch wrote (F32 except
// "scalar", which is F64), converted to T.
template <class T>
void check_store(const std::string& path) {
  param_store<T> p;
  for (const auto& s : specs) p.set(s.name, tensor<T>(s.dims));
  load_safetensors(path, p, {.strict = false});  // the file also holds integer tensors
  for (std::size_t t = 0; t < specs.size(); ++t) {
    const tensor<T>& v = p.value(specs[t].name);
    for (std::int64_t i = 0; i < v.size(); ++i) {
      const double x = expected_value(t, i);
      const T want = std::string(specs[t].name) == "scalar" ? static_cast<T>(x) : static_cast<T>(static_cast<float>(x));
      expect(std::memcmp(&v[i], &want, sizeof(T)) == 0, std::string(specs[t].name) + "[" + std::to_string(i) +
                                                            "] in a store of " + (sizeof(T) == 4 ? "float" : "double"));
    }
  }
}

// The 16-bit patterns of a BF16 or F16 tensor.
std::vector<std::uint16_t> bits_of(const stored_tensor& s) {
  std::vector<std::uint16_t> bits(s.bytes.size() / 2);
  std::memcpy(bits.data(), s.bytes.data(), bits.size() * 2);
  return bits;
}

// torch's float32 -> bf16 / f16 (rounded to nearest even) and back, against loom's.
void check_half(const tensor_file& f, const char* suffix, storage_type type, std::uint16_t (*narrow)(float),
                float (*widen)(std::uint16_t)) {
  const std::string name = std::string("half.") + suffix;
  const tensor<float> values = to_tensor<float>(f.at("half.f32"));
  const stored_tensor& torch_half = f.at(name);
  expect(torch_half.type == type, name + " dtype");
  const std::vector<std::uint16_t> torch_bits = bits_of(torch_half);
  const tensor<float> torch_widened = to_tensor<float>(f.at(name + ".widened"));
  const tensor<float> loom_widened = to_tensor<float>(torch_half);
  const std::vector<std::uint16_t> loom_bits = bits_of(to_stored(values, type));
  const std::uint16_t exponent = type == storage_type::bf16 ? 0x7f80 : 0x7c00;
  int wrong = 0;
  for (std::int64_t i = 0; i < values.size(); ++i) {
    const std::uint16_t t = torch_bits[static_cast<std::size_t>(i)];
    const bool nan = (t & exponent) == exponent && (t & ~exponent & 0x7fff) != 0;  // torch's NaN pattern is its own
    const std::uint16_t mine = narrow(values[i]);
    const bool same_rounding = nan ? std::isnan(widen(mine)) : mine == t;
    const bool same_widening = nan ? std::isnan(loom_widened[i]) && std::isnan(widen(t))
                                   : std::memcmp(&loom_widened[i], &torch_widened[i], 4) == 0;
    const bool same_tensor = nan ? std::isnan(widen(loom_bits[static_cast<std::size_t>(i)]))
                                 : loom_bits[static_cast<std::size_t>(i)] == t;
    if (!(same_rounding && same_widening && same_tensor) && wrong++ < 5)
      expect(false, name + "[" + std::to_string(i) + "]: float " + std::to_string(values[i]) + ", torch bits " +
                        std::to_string(t) + ", loom bits " + std::to_string(mine));
  }
  expect(wrong == 0, name + ": " + std::to_string(wrong) + " of " + std::to_string(values.size()) + " values differ");
  expect(values.size() > 5000, name + ": fewer values than written");
}

int write(const std::string& dir) {
  save_safetensors(dir + "/from_loom_f32.safetensors", expected_store<float>(), {{"framework", "loom"}, {"step", "3"}});
  for (const auto& [suffix, type] : {std::pair{"bf16", storage_type::bf16}, std::pair{"f16", storage_type::f16}}) {
    tensor_file half;
    for (const auto& [name, e] : expected_store<float>()) half.tensors[name] = to_stored(e.value, type);
    write_safetensors(dir + "/from_loom_" + suffix + ".safetensors", half);
  }
  save_safetensors(dir + "/from_loom_f64.safetensors", expected_store<double>(),
                   {{"framework", "loom"}, {"step", "3"}});
  // A checkpoint after one Adam step with all gradients 0.5: PyTorch reads it as plain safetensors.
  auto params = expected_store<float>();
  for (auto& [name, e] : params) e.grad.fill(0.5f);
  adam<float> opt(params, {.lr = 0.01});
  opt.step();
  save_checkpoint(dir + "/from_loom_ckpt.safetensors", params, opt, {{"seed", "42"}});
  return 0;
}

int check(const std::string& dir) {
  const std::string path = dir + "/from_torch.safetensors";
  check_store<float>(path);
  check_store<double>(path);
  const tensor_file f = read_safetensors(path);
  expect(f.metadata.size() == 2 && f.metadata.at("framework") == "pytorch" && f.metadata.at("note") == "ünïcode ✓",
         "metadata");
  const auto ids = to_tensor<std::int64_t>(f.at("token_ids"));
  const std::int64_t want_ids[] = {0, 1, -1, std::int64_t(1) << 40, 7};
  expect(ids.size() == 5 && std::equal(ids.data(), ids.data() + 5, want_ids), "token_ids (I64)");
  const auto mask = to_tensor<std::uint8_t>(f.at("mask"));
  expect(f.at("mask").type == storage_type::boolean && mask.size() == 3 && mask[0] == 1 && mask[1] == 0 && mask[2] == 1,
         "mask (BOOL)");
  expect(f.at("scalar").type == storage_type::f64 && f.at("decoder.norm.weight").type == storage_type::f32, "dtypes");
  check_half(f, "bf16", storage_type::bf16, bf16_from_float, float_from_bf16);
  check_half(f, "f16", storage_type::f16, f16_from_float, float_from_f16);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: safetensors_interop write|check <dir>\n";
    return 2;
  }
  try {
    const std::string command = argv[1];
    if (command == "write") return write(argv[2]);
    if (command == "check") return check(argv[2]);
    std::cerr << "unknown command " << command << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
