// libFuzzer target over every reader of files from outside: read_safetensors, load_safetensors,
// load_checkpoint (with and without an optimizer) and the PyTorch importers. Each input is a
// file's bytes. Besides crashes, sanitizer reports and hangs (libFuzzer's -timeout), it fails
// (aborts) when
//   - anything but a loom::error escapes a reader,
//   - a loader that throws changed its store or its optimizer (on error nothing changes),
//   - the heap held at once while reading exceeds 64 MiB + 4 × the file's size.
// The mutator keeps the header length consistent with the header most of the time, so that
// mutations reach the JSON and the data instead of stopping at the length check.
// Build and run: scripts/fuzz (docs/reliability.md).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_stores.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/safetensors.hpp"
#include "loom/io/torch_import.hpp"
#include "support/heap_counter.hpp"

using namespace loom;

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_readers: %s\n", what.c_str());
  std::abort();
}

// The input's file: one per process (libFuzzer's -jobs run several), in $TMPDIR, else in
// memory (/dev/shm) where there is one: a disk file costs more than the reading.
const std::string& input_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    const std::string folder = dir && *dir ? dir : ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return folder + "/loom-fuzz-" + std::to_string(::getpid()) + ".safetensors";
  }();
  return path;
}

void write_input(const std::uint8_t* data, std::size_t size) {
  static const int fd = ::open(input_path().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || ::ftruncate(fd, 0) != 0 || (size > 0 && ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)))
    finding("cannot write the input file " + input_path());
}

template <class T>
bool same(const param_store<T>& a, const param_store<T>& b) {
  if (a.names() != b.names()) return false;
  for (const auto& name : a.names()) {
    const auto &x = a.value(name), &y = b.value(name);
    if (!(x.dims() == y.dims()) || std::memcmp(x.data(), y.data(), sizeof(T) * static_cast<std::size_t>(x.size())))
      return false;
  }
  return true;
}

template <class T>
bool same(const optimizer_state<T>& a, const optimizer_state<T>& b) {
  if (a.step != b.step || a.buffers.size() != b.buffers.size()) return false;
  for (const auto& [kind, by_param] : a.buffers) {
    auto it = b.buffers.find(kind);
    if (it == b.buffers.end() || it->second.size() != by_param.size()) return false;
    for (const auto& [name, t] : by_param) {
      auto u = it->second.find(name);
      if (u == it->second.end() || !(u->second.dims() == t.dims()) ||
          std::memcmp(u->second.data(), t.data(), sizeof(T) * static_cast<std::size_t>(t.size())))
        return false;
    }
  }
  return true;
}

// Runs a loader on `store` (equal to `pristine`): if it throws, the store must be unchanged;
// if it succeeds, the store is set back to `pristine` for the next input.
template <class Load>
void load_or_nothing(const char* who, param_store<float>& store, const param_store<float>& pristine, Load&& load) {
  try {
    load(store);
  } catch (const error&) {
    if (!same(store, pristine)) finding(std::string(who) + " threw but changed the store");
    return;
  }
  store = pristine;
}

// The stores the loaders load into, kept between inputs (copies cost more than the reading).
struct working_stores {
  param_store<float> attention = fuzz::stores().attention, lenient = attention;
  param_store<float> transformer = fuzz::stores().transformer, checkpoint = fuzz::stores().checkpoint;
  param_store<float> trained = fuzz::stores().checkpoint;
  adam<float> opt{trained};
  param_store<float> trained_before;
  optimizer_state<float> state_before;
  working_stores() {
    fuzz::step_once(trained, opt);
    trained_before = trained;
    state_before = opt.state();
  }
};

void read_all(const std::string& path, working_stores& w) {
  try {
    const tensor_file file = read_safetensors(path);
    for (const auto& [name, s] : file.tensors) {
      (void)first_non_finite(s);
      if (s.shape.size() <= static_cast<std::size_t>(max_rank)) (void)to_tensor<double>(s);
    }
  } catch (const error&) {
  }
  const auto& pristine = fuzz::stores();
  load_or_nothing("load_safetensors", w.attention, pristine.attention, [&](auto& p) { load_safetensors(path, p); });
  load_or_nothing("load_safetensors (not strict)", w.lenient, pristine.attention,
                  [&](auto& p) { load_safetensors(path, p, {.strict = false, .allow_non_finite = true}); });
  load_or_nothing("load_checkpoint (parameters)", w.checkpoint, pristine.checkpoint,
                  [&](auto& p) { load_checkpoint(path, p); });
  try {
    load_checkpoint(path, w.trained, w.opt);
    w.trained = w.trained_before;
    w.opt.load_state(w.state_before);
  } catch (const error&) {
    if (!same(w.trained, w.trained_before) || !same(w.opt.state(), w.state_before))
      finding("load_checkpoint threw but changed the parameters or the optimizer");
  }
  load_or_nothing("load_multihead_attention", w.attention, pristine.attention,
                  [&](auto& p) { pytorch::load_multihead_attention(path, p, {.loom = "att"}); });
  load_or_nothing("load_transformer", w.transformer, pristine.transformer,
                  [&](auto& p) { pytorch::load_transformer(path, p); });
}

// The largest heap held while reading one input, printed when the run ends.
struct peak_record {
  std::size_t peak = 0, size = 0;
  ~peak_record() {
    std::fprintf(stderr, "fuzz_readers: largest heap held while reading one input: %zu bytes (input of %zu bytes)\n",
                 peak, size);
  }
};
peak_record largest;
void record_peak(std::size_t peak, std::size_t size) {
  if (peak > largest.peak) largest.peak = peak, largest.size = size;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static working_stores stores;  // made once, outside the measurement
  write_input(data, size);
  const std::size_t before = test::heap_counter::held();
  test::heap_counter::reset_peak();
  read_all(input_path(), stores);
  const std::size_t peak = test::heap_counter::peak_since_reset() - before;
  const std::size_t bound = (std::size_t{64} << 20) + 4 * size;
  record_peak(peak, size);
  if (peak > bound)
    finding("reading a file of " + std::to_string(size) + " bytes held " + std::to_string(peak) +
            " bytes of heap at once, more than 64 MiB + 4 x its size");
  if (test::heap_counter::held() > before + (1 << 20)) finding("memory held after the input: a leak?");
  return 0;
}

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

// Mostly mutates the header or the data section and then writes the header's length anew;
// sometimes mutates the raw bytes, length field included.
extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  if (size < 8 || seed % 8 == 0) return LLVMFuzzerMutate(data, size, max_size);
  std::uint64_t n = 0;
  std::memcpy(&n, data, 8);
  n = std::min<std::uint64_t>(n, size - 8);
  std::vector<std::uint8_t> header(data + 8, data + 8 + n), rest(data + 8 + n, data + size);
  const bool in_header = seed % 4 != 0;  // the header 3 times in 4
  std::vector<std::uint8_t>& part = in_header ? header : rest;
  const std::size_t other = in_header ? rest.size() : header.size();
  const std::size_t len = part.size();
  if (len == 0) return LLVMFuzzerMutate(data, size, max_size);
  part.resize(max_size - 8 - other);  // as much room as the whole input has (>= len)
  part.resize(LLVMFuzzerMutate(part.data(), len, part.size()));
  const std::uint64_t length = header.size();
  std::memcpy(data, &length, 8);
  std::copy(header.begin(), header.end(), data + 8);
  std::copy(rest.begin(), rest.end(), data + 8 + header.size());
  return 8 + header.size() + rest.size();
}
