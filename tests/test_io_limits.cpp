// Readers against hostile files: nesting, header size, entry count, time and memory bounds,
// and non-finite values, through every loader (read_safetensors, load_safetensors,
// load_checkpoint, the PyTorch importers). Each case is a crafted file: the smallest one that
// crashed, hung or bloated loom before these limits.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "io_test_support.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/torch_import.hpp"
#include "loom/loom.hpp"
#include "support/heap_counter.hpp"
#include "test_support.hpp"

using namespace loom;
using test::message_of;
using test::scratch_dir;

namespace {

// {"w": {"dtype": "F32", "shape": <shape>, "data_offsets": <offsets>}} with no data.
std::vector<char> one_entry(const std::string& shape, const std::string& offsets) {
  return test::raw_safetensors(R"({"w":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}");
}

std::string nested(int depth) { return std::string(static_cast<std::size_t>(depth), '[') + std::string(static_cast<std::size_t>(depth), ']'); }

// A header of n zero-size entries "t0", "t1", ...: a valid file.
std::string zero_size_entries(int n) {
  std::string h = "{";
  for (int i = 0; i < n; ++i)
    h += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
  return h + "}";
}

double seconds_to_read(const std::string& path) {
  double best = 1e9;
  for (int run = 0; run < 3; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)read_safetensors(path);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

template <class Fn>
std::size_t peak_heap_of(Fn&& fn) {
  const std::size_t before = test::heap_counter::held();
  test::heap_counter::reset_peak();
  fn();
  return test::heap_counter::peak_since_reset() - before;
}

}  // namespace

TEST_CASE("a shape or data_offsets nested 100,000 deep is refused as io_error by every reader, without recursion") {
  scratch_dir dir("limits");
  const std::string deep = nested(100'000);
  for (const auto& bytes : {one_entry(deep, "[0,0]"), one_entry("[0]", deep)}) {
    const std::string path = dir.file("deep.safetensors");
    test::write_bytes(path, bytes);
    CHECK_THAT(message_of([&] { read_safetensors(path); }),
               Catch::Contains("deep.safetensors") && Catch::Contains("holds an array, not a non-negative integer"));
    param_store<float> params;
    params.set("w", tensor<float>(dims_t{0}));
    adam<float> opt(params);
    CHECK_THROWS_AS(load_safetensors(path, params), io_error);
    CHECK_THROWS_AS(load_checkpoint(path, params), io_error);
    CHECK_THROWS_AS(load_checkpoint(path, params, opt), io_error);
    CHECK_THROWS_AS(pytorch::load_multihead_attention(path, params, {}), io_error);
    CHECK_THROWS_AS(pytorch::load_transformer(path, params), io_error);
  }
}

TEST_CASE("objects nested inside an entry or in the metadata are refused: the format is a flat object of flat objects") {
  scratch_dir dir("limits");
  const std::string path = dir.file("n.safetensors");
  test::write_bytes(path, one_entry(R"([{"a":[{"b":1}]}])", "[0,0]"));
  CHECK_THAT(message_of([&] { read_safetensors(path); }), Catch::Contains("\"shape\" holds an object"));
  test::write_bytes(path, test::raw_safetensors(R"({"__metadata__":{"k":{"deeper":{}}}})"));
  CHECK_THAT(message_of([&] { read_safetensors(path); }), Catch::Contains("metadata \"k\" is not a string"));
  test::write_bytes(path, test::raw_safetensors(R"({"w":{"dtype":{"x":"F32"},"shape":[],"data_offsets":[0,0]}})"));
  CHECK_THAT(message_of([&] { read_safetensors(path); }), Catch::Contains("\"dtype\" is missing or not a string"));
}

TEST_CASE("a header length above 100 MB is refused before the header is read") {
  scratch_dir dir("limits");
  const std::string path = dir.file("big.safetensors");
  const std::uint64_t n = max_header_bytes + 1;
  test::write_bytes(path, test::raw_safetensors(""));
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, &n, 8, 0) == 8);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(8 + n)) == 0);  // sparse: no disk used
  ::close(fd);
  std::size_t peak = 0;
  const std::string message = message_of([&] { peak = peak_heap_of([&] { read_safetensors(path); }); });
  CHECK_THAT(message, Catch::Contains("header length 100000001 is larger than the limit of 100000000 bytes"));
  CHECK(peak < (1u << 20));  // nothing of its size was allocated
}

TEST_CASE("a shape with more than 64 dims is refused") {
  scratch_dir dir("limits");
  const std::string path = dir.file("rank.safetensors");
  std::string shape = "[";
  for (int i = 0; i < 65; ++i) shape += i ? ",1" : "1";
  test::write_bytes(path, one_entry(shape + "]", "[0,4]"));
  CHECK_THAT(message_of([&] { read_safetensors(path); }), Catch::Contains("\"shape\" has more than 64 dims"));
}

TEST_CASE("a header listing more than a million tensors is refused") {
  scratch_dir dir("limits");
  const std::string path = dir.file("many.safetensors");
  test::write_bytes(path, test::raw_safetensors(zero_size_entries(static_cast<int>(max_stored_tensors) + 1)));
  CHECK_THAT(message_of([&] { read_safetensors(path); }), Catch::Contains("more than 1000000 tensors"));
}

TEST_CASE("a tensor name or metadata value of megabytes is refused, and reading it stays within 64 MiB + 4 times the file") {
  scratch_dir dir("limits");
  const std::string path = dir.file("long_name.safetensors");
  for (const std::size_t length : {max_header_string_bytes + 1, std::size_t{40} << 20}) {
    const std::string name(length, 'n');
    const auto bytes = test::raw_safetensors("{\"" + name + R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})");
    test::write_bytes(path, bytes);
    std::size_t peak = 0;
    const std::string message = message_of([&] { peak = peak_heap_of([&] { read_safetensors(path); }); });
    INFO("name of " << length << " bytes, file " << bytes.size() << " bytes, peak heap " << peak << " bytes");
    CHECK_THAT(message, Catch::Contains("a string in the header (a tensor name or metadata) is longer than the limit of "
                                        "1048576 bytes"));
    CHECK(peak < (std::size_t{64} << 20) + 4 * bytes.size());
    CHECK(peak < 8 * max_header_string_bytes + (1u << 20));  // refused as it passes the limit, not after
  }
  const std::string meta(max_header_string_bytes + 1, 'v');
  test::write_bytes(path, test::raw_safetensors(R"({"__metadata__":{"k":")" + meta + "\"}}"));
  CHECK_THAT(message_of([&] { read_safetensors(path); }), Catch::Contains("is longer than the limit"));
}

TEST_CASE("a name of exactly the string limit is read, escaped quotes inside names included") {
  scratch_dir dir("limits");
  const std::string path = dir.file("limit_name.safetensors");
  std::string name(max_header_string_bytes - 3, 'n');
  name += "\\\"x";  // \" and x: 3 bytes of the file (the quote escaped: the string goes on)
  test::write_bytes(path, test::raw_safetensors("{\"" + name + R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})"));
  const auto file = read_safetensors(path);
  REQUIRE(file.tensors.size() == 1);
  CHECK(file.tensors.begin()->first.size() == max_header_string_bytes - 1);  // the name as JSON decodes it
}

TEST_CASE("a header of more than 100,000 metadata entries is refused, so tiny entries cannot bloat memory") {
  scratch_dir dir("limits");
  const std::string path = dir.file("meta.safetensors");
  auto metadata = [](int n) {
    std::string h = R"({"__metadata__":{)";
    for (int i = 0; i < n; ++i) h += (i ? ",\"" : "\"") + std::to_string(i) + "\":\"\"";
    return h + "}}";
  };
  const auto allowed = test::raw_safetensors(metadata(static_cast<int>(max_metadata_entries)));
  test::write_bytes(path, allowed);
  std::size_t peak = 0;
  peak = peak_heap_of([&] { CHECK(read_safetensors(path).metadata.size() == max_metadata_entries); });
  INFO("file " << allowed.size() << " bytes, peak heap " << peak << " bytes");
  CHECK(peak < (std::size_t{64} << 20));  // ~14 bytes of memory per header byte, bounded by the count
  test::write_bytes(path, test::raw_safetensors(metadata(static_cast<int>(max_metadata_entries) + 1)));
  CHECK_THAT(message_of([&] { read_safetensors(path); }), Catch::Contains("more than 100000 metadata entries"));
}

TEST_CASE("reading a header takes time linear in its number of entries") {
  scratch_dir dir("limits");
  const std::string small = dir.file("small.safetensors"), large = dir.file("large.safetensors");
  test::write_bytes(small, test::raw_safetensors(zero_size_entries(20'000)));
  test::write_bytes(large, test::raw_safetensors(zero_size_entries(80'000)));
  REQUIRE(read_safetensors(large).tensors.size() == 80'000);
  const double t_small = seconds_to_read(small), t_large = seconds_to_read(large);
  INFO("20,000 entries: " << t_small << " s, 80,000 entries: " << t_large << " s");
  CHECK(t_large < 8 * t_small + 0.05);  // 4 times the entries: about 4 times the time (quadratic: 16)
}

TEST_CASE("memory while reading a header of many small entries stays below 64 MiB + 4 times the file size") {
  scratch_dir dir("limits");
  const std::string path = dir.file("entries.safetensors");
  const auto bytes = test::raw_safetensors(zero_size_entries(400'000));  // ~24 MB
  test::write_bytes(path, bytes);
  std::size_t tensors = 0;
  const std::size_t peak = peak_heap_of([&] { tensors = read_safetensors(path).tensors.size(); });
  INFO("file " << bytes.size() << " bytes, peak heap " << peak << " bytes");
  CHECK(tensors == 400'000);
  CHECK(peak < (std::size_t{64} << 20) + 4 * bytes.size());
  CHECK(peak < 4 * bytes.size());  // and the per-entry cost alone is below 4 bytes per header byte
}

TEST_CASE("memory while reading a header of 64-dim shapes stays below 4 times the file size") {
  // 8 bytes of memory per dim for 2 bytes of header ("0,"): the costliest valid entries
  scratch_dir dir("limits");
  const std::string path = dir.file("dims.safetensors");
  std::string shape = "[0";
  for (std::size_t i = 1; i < max_stored_rank; ++i) shape += ",0";
  shape += "]";
  std::string h = "{";
  for (int i = 0; i < 60'000; ++i)
    h += (i ? ",\"" : "\"") + std::to_string(i) + R"(":{"dtype":"U8","shape":)" + shape + R"(,"data_offsets":[0,0]})";
  const auto bytes = test::raw_safetensors(h + "}");
  test::write_bytes(path, bytes);
  const std::size_t peak = peak_heap_of([&] { (void)read_safetensors(path); });
  INFO("file " << bytes.size() << " bytes, peak heap " << peak << " bytes");
  CHECK(peak < 4 * bytes.size());
}

TEST_CASE("reading a file of one large tensor holds its bytes once, not twice") {
  scratch_dir dir("limits");
  const std::string path = dir.file("large.safetensors");
  param_store<float> params;
  params.set("w", tensor<float>({8 << 20}));  // 32 MiB
  save_safetensors(path, params);
  params = {};
  const std::size_t size = std::filesystem::file_size(path);
  const std::size_t peak = peak_heap_of([&] { (void)read_safetensors(path); });
  INFO("file " << size << " bytes, peak heap " << peak << " bytes");
  CHECK(peak < size + size / 8);
}

TEST_CASE("a file of NaN or infinite parameters is refused by default, naming the tensor, and loads when allowed") {
  scratch_dir dir("limits");
  const std::string path = dir.file("nan.safetensors");
  param_store<float> bad;
  bad.set("a", tensor<float>({3}, {1.0f, 2.0f, 3.0f}));
  bad.set("b", tensor<float>({2}, {0.0f, std::numeric_limits<float>::quiet_NaN()}));
  bad.set("c", tensor<float>({1}, {-std::numeric_limits<float>::infinity()}));
  save_safetensors(path, bad);

  param_store<float> params;
  params.set("a", tensor<float>({3}));
  params.set("b", tensor<float>({2}));
  params.set("c", tensor<float>({1}));
  const param_store<float> before = params;
  const std::string message = message_of([&] { load_safetensors(path, params); });
  CHECK_THAT(message, Catch::Contains("\"b\" holds NaN at element 1 of [2]") &&
                          Catch::Contains("\"c\" holds -infinity at element 0 of [1]") &&
                          Catch::Contains("allow_non_finite") && !Catch::Contains("\"a\" holds"));
  CHECK_THROWS_AS(load_safetensors(path, params), load_mismatch_error);
  CHECK(test::same_values(params, before));

  load_safetensors(path, params, {.allow_non_finite = true});
  CHECK(std::isnan(params.value("b")[1]));
}

TEST_CASE("a checkpoint with NaN in a parameter or an optimizer buffer is refused, and loads when allowed") {
  scratch_dir dir("limits");
  const std::string path = dir.file("ckpt.safetensors");
  param_store<float> params;
  params.set("w", tensor<float>({2}, {0.5f, -0.5f}));
  adam<float> opt(params);
  params.grad("w").fill(1.0f);
  opt.step();
  const_cast<tensor<float>&>(opt.state().buffers.at("exp_avg").at("w"))[0] = std::numeric_limits<float>::infinity();
  save_checkpoint(path, params, opt);

  param_store<float> into;
  into.set("w", tensor<float>({2}));
  adam<float> fresh(into);
  CHECK_THAT(message_of([&] { load_checkpoint(path, into, fresh); }),
             Catch::Contains("\"optimizer.exp_avg.w\" holds +infinity at element 0"));
  CHECK(fresh.steps() == 0);
  CHECK(into.value("w")[0] == 0.0f);
  load_checkpoint(path, into, fresh, {.allow_non_finite = true});
  CHECK(fresh.steps() == 1);
  CHECK(std::isinf(fresh.state().buffers.at("exp_avg").at("w")[0]));
}

TEST_CASE("a checkpoint whose Adam exp_avg_sq holds a negative value is refused, naming it, and nothing loads") {
  scratch_dir dir("limits");
  const std::string path = dir.file("negative.safetensors");
  param_store<float> params;
  params.set("w", tensor<float>({2}, {0.5f, -0.5f}));
  adam<float> opt(params);
  params.grad("w").fill(1.0f);
  opt.step();
  save_checkpoint(path, params, opt);
  auto file = read_safetensors(path);  // the second moment's element 1 made -3, as swapped offsets can
  auto& bytes = file.tensors.at("optimizer.exp_avg_sq.w").bytes;
  const float minus_three = -3.0f;
  std::memcpy(bytes.data() + sizeof(float), &minus_three, sizeof(float));
  write_safetensors(path, file);
  param_store<float> into;
  into.set("w", tensor<float>({2}));
  adam<float> fresh(into);
  for (bool allow_non_finite : {false, true})
    CHECK_THAT(message_of([&] { load_checkpoint(path, into, fresh, {.allow_non_finite = allow_non_finite}); }),
               Catch::Contains("exp_avg_sq of \"w\": element 1 is -3") &&
                   Catch::Contains("a second moment is never negative"));
  CHECK(fresh.steps() == 0);
  CHECK(into.value("w")[0] == 0.0f);
}

TEST_CASE("a PyTorch state_dict holding NaN is refused by the importer unless allowed") {
  scratch_dir dir("limits");
  const std::string path = dir.file("mha.safetensors");
  tensor_file f;
  tensor<float> w({6, 2});
  w[5] = std::numeric_limits<float>::quiet_NaN();
  f.tensors["in_proj_weight"] = to_stored(w);
  f.tensors["in_proj_bias"] = to_stored(tensor<float>({6}));
  f.tensors["out_proj.weight"] = to_stored(tensor<float>({2, 2}));
  f.tensors["out_proj.bias"] = to_stored(tensor<float>({2}));
  write_safetensors(path, f);
  param_store<float> params;
  params.set("att.in_proj_weight", tensor<float>({6, 2}));
  params.set("att.in_proj_bias", tensor<float>({6}));
  params.set("att.out_proj.weight", tensor<float>({2, 2}));
  params.set("att.out_proj.bias", tensor<float>({2}));
  CHECK_THAT(message_of([&] { pytorch::load_multihead_attention(path, params, {.loom = "att"}); }),
             Catch::Contains("\"in_proj_weight\" holds NaN at element 5 of [6, 2]"));
  CHECK(params.value("att.in_proj_weight")[5] == 0.0f);
  pytorch::load_multihead_attention(path, params, {.loom = "att"}, {.allow_non_finite = true});
  CHECK(std::isnan(params.value("att.in_proj_weight")[5]));
}

TEST_CASE("a checkpoint whose step count is 2^63 - 1 is refused: the next step would overflow it") {
  scratch_dir dir("limits");
  const std::string path = dir.file("step.safetensors");
  param_store<float> params;
  params.set("w", tensor<float>({1}));
  sgd<float> opt(params, 0.1);
  save_checkpoint(path, params, opt);
  tensor_file f = read_safetensors(path);
  f.metadata["optimizer.step"] = std::to_string(std::numeric_limits<std::int64_t>::max());
  write_safetensors(path, f);
  CHECK_THAT(message_of([&] { load_checkpoint(path, params, opt); }),
             Catch::Contains("step count 9223372036854775807 leaves no room for another step"));
  CHECK(opt.steps() == 0);
}

TEST_CASE("an optimizer at the largest step count refuses another step and changes nothing") {
  param_store<float> params;
  params.set("w", tensor<float>({1}, {2.0f}));
  sgd<float> opt(params, 0.1);
  optimizer_state<float> at_max;
  at_max.step = std::numeric_limits<std::int64_t>::max() - 1;
  opt.load_state(at_max);
  params.grad("w").fill(1.0f);
  opt.step();  // the last step there is room for
  CHECK(params.value("w")[0] == Approx(1.9f));
  CHECK_THAT(message_of([&] { opt.step(); }), Catch::Contains("cannot grow any further"));
  CHECK(params.value("w")[0] == Approx(1.9f));
}
