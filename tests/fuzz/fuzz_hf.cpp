// libFuzzer target over the readers of Hugging Face checkpoint folders (loom/io/hf_checkpoint.hpp).
// Each input is a JSON text, used three ways:
//   - as config.json: hf::parse_config, every typed accessor on every field, config_differences;
//   - as an index: hf::parse_index;
//   - as the model.safetensors.index.json of a folder whose two shards are valid (written once):
//     hf::read_tensors and hf::load through a GPT-2-like name map, strict and not.
// It fails (aborts) when anything but a loom::error escapes, when a load that threw changed its
// store, or when the heap held at once exceeds 64 MiB + 4 × the input's size. Build and run:
// scripts/fuzz (docs/reliability.md).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "loom/io/hf_checkpoint.hpp"
#include "support/heap_counter.hpp"

using namespace loom;

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_hf: %s\n", what.c_str());
  std::abort();
}

tensor<float> counting(dims_t dims, float start) {
  tensor<float> t(dims);
  for (std::int64_t i = 0; i < t.size(); ++i) t[i] = start + 0.25f * static_cast<float>(i);
  return t;
}

// wte [5, 2], a Conv1D weight stored [2, 6] (loom's [6, 2]) and its bias [6].
param_store<float> make_store() {
  param_store<float> p;
  p.set("wte", counting({5, 2}, -1));
  p.set("attn.w", counting({6, 2}, 0.5f));
  p.set("attn.b", counting({6}, 2));
  return p;
}
const hf::name_map names = {
    {"wte", {"transformer.wte.weight"}},
    {"attn.w", {"transformer.h.0.attn.c_attn.weight", hf::layout::transposed}},
    {"attn.b", {"transformer.h.0.attn.c_attn.bias"}},
};

bool same(const param_store<float>& a, const param_store<float>& b) {
  for (const auto& [name, e] : a) {
    const auto& y = b.value(name);
    if (!(e.value.dims() == y.dims()) ||
        std::memcmp(e.value.data(), y.data(), sizeof(float) * static_cast<std::size_t>(y.size())))
      return false;
  }
  return true;
}

struct remove_at_exit {
  std::string path;
  ~remove_at_exit() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// The folder, one per process, in $TMPDIR or /dev/shm: two shards written by hf::save, whose
// index each input replaces.
const std::string& folder() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    const std::string base = dir && *dir ? dir : ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    const std::string f = base + "/loom-fuzz-hf-" + std::to_string(::getpid());
    hf::save(f, make_store(), names, {{"n_embd", "2"}}, {.max_shard_bytes = 72});
    return f;
  }();
  static const remove_at_exit cleanup{path};
  return path;
}

void exercise(const std::string& text, param_store<float>& store, const param_store<float>& pristine) {
  try {
    const hf::model_config c = hf::parse_config(text);
    for (const auto& [name, field] : c.fields) {
      try { (void)c.integer(name); } catch (const error&) {}
      try { (void)c.number(name); } catch (const error&) {}
      try { (void)c.boolean(name); } catch (const error&) {}
      try { (void)c.string(name); } catch (const error&) {}
    }
    (void)hf::config_differences(c, {{"n_embd", "2"}, {"rms_norm_eps", "1e-05"}, {"rope_scaling", "{\"factor\":8.0}"}});
  } catch (const error&) {
  }
  try {
    (void)hf::parse_index(text);
  } catch (const error&) {
  }
  {
    std::ofstream out(folder() + "/model.safetensors.index.json", std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  try {
    (void)hf::read_tensors(folder());
  } catch (const error&) {
  }
  for (bool strict : {true, false}) {
    try {
      hf::load(folder(), store, names, {.strict = strict});
      store = pristine;
    } catch (const error&) {
      if (!same(store, pristine)) finding("hf::load threw but changed the store");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const param_store<float> pristine = make_store();
  static param_store<float> store = pristine;
  (void)folder();  // made once, outside the measurement
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::size_t before = test::heap_counter::held();
  test::heap_counter::reset_peak();
  exercise(text, store, pristine);
  const std::size_t peak = test::heap_counter::peak_since_reset() - before;
  if (peak > (std::size_t{64} << 20) + 4 * size)
    finding("an input of " + std::to_string(size) + " bytes held " + std::to_string(peak) +
            " bytes of heap at once, more than 64 MiB + 4 x its size");
  if (test::heap_counter::held() > before + (1 << 20)) finding("memory held after the input: a leak?");
  return 0;
}
