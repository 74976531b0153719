// safetensors: the format byte by byte, every dtype, validation of hostile files (never a
// crash), loading into a store all-or-nothing, and atomic writes.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "io_test_support.hpp"
#include "loom/loom.hpp"
#include "test_support.hpp"

using namespace loom;
using test::message_of;
using test::same_bits;
using test::same_values;
using test::scratch_dir;

namespace {

template <class T>
param_store<T> small_store() {
  param_store<T> p;
  p.set("enc.0.weight", test::random_tensor<T>({3, 4}, 1));
  p.set("enc.0.bias", test::random_tensor<T>({4}, 2));
  p.set("scale", test::random_tensor<T>({}, 3));
  return p;
}

// A valid one-tensor file: "w" = [1, -2] as F32.
const std::string tiny_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
const std::vector<char> tiny_data = test::le_bytes<float>({1.0f, -2.0f});

}  // namespace

TEMPLATE_TEST_CASE("a saved store reads back with the same names, dtype, shapes, bits and metadata", "", float,
                   double) {
  scratch_dir dir("io");
  const auto params = small_store<TestType>();
  save_safetensors(dir.file("p.safetensors"), params, {{"step", "12"}, {"note", "hello"}});

  const tensor_file file = read_safetensors(dir.file("p.safetensors"));
  CHECK(file.metadata == std::map<std::string, std::string>{{"step", "12"}, {"note", "hello"}});
  REQUIRE(file.tensors.size() == 3);
  for (const auto& [name, e] : params) {
    const stored_tensor& s = file.at(name);
    CHECK(s.type == storage_type_of<TestType>());
    CHECK(same_bits(to_tensor<TestType>(s), e.value));
  }
  CHECK(file.at("scale").shape.empty());  // a scalar has shape []
  CHECK_THROWS_AS(file.at("nope"), missing_error);
  CHECK_FALSE(std::filesystem::exists(dir.file("p.safetensors.tmp")));
}

TEST_CASE("the file is laid out as the format says: u64 length, padded JSON header, little-endian data") {
  scratch_dir dir("io");
  param_store<float> p;
  p.set("w", tensor<float>({2}, {1.0f, -2.0f}));
  save_safetensors(dir.file("w.safetensors"), p);
  const auto bytes = test::read_bytes(dir.file("w.safetensors"));

  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  REQUIRE(bytes.size() == 8 + n + 8);
  CHECK((8 + n) % 8 == 0);  // data section aligned
  const std::string header(bytes.data() + 8, n);
  CHECK(header.find(R"({"w":{"data_offsets":[0,8],"dtype":"F32","shape":[2]}})") == 0);
  CHECK(header.find_first_not_of(' ', header.rfind('}') + 1) == std::string::npos);  // space padding
  // 1.0f is 0x3F800000 and -2.0f is 0xC0000000, little-endian.
  const std::vector<unsigned char> data(bytes.end() - 8, bytes.end());
  CHECK(data == std::vector<unsigned char>{0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0});
}

TEST_CASE("a hand-written file with every supported dtype, unsorted offsets and padding reads and converts") {
  scratch_dir dir("io");
  const std::string header = R"({"z_f64":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
                             R"("a_f32":{"dtype":"F32","shape":[1,2],"data_offsets":[16,24]},)"
                             R"("i32":{"dtype":"I32","shape":[2],"data_offsets":[24,32]},)"
                             R"("i64":{"dtype":"I64","shape":[],"data_offsets":[32,40]},)"
                             R"("u8":{"dtype":"U8","shape":[3],"data_offsets":[40,43]},)"
                             R"("flag":{"dtype":"BOOL","shape":[2],"data_offsets":[43,45]},)"
                             R"("empty":{"dtype":"F32","shape":[0,3],"data_offsets":[45,45]},)"
                             R"("__metadata__":{"source":"hand"}}      )";
  const auto data =
      test::concat_bytes({test::le_bytes<double>({0.5, -1.25}), test::le_bytes<float>({3.5f, -0.0f}),
                          test::le_bytes<std::int32_t>({-7, 2147483647}), test::le_bytes<std::int64_t>({-9000000000}),
                          test::le_bytes<std::uint8_t>({0, 200, 255}), test::le_bytes<std::uint8_t>({1, 0})});
  test::write_bytes(dir.file("all.safetensors"), test::raw_safetensors(header, data));

  const tensor_file f = read_safetensors(dir.file("all.safetensors"));
  CHECK(f.metadata.at("source") == "hand");
  CHECK(f.at("z_f64").type == storage_type::f64);
  CHECK(to_tensor<double>(f.at("z_f64")).values()[1] == -1.25);
  const auto a = to_tensor<float>(f.at("a_f32"));
  CHECK(a.dims() == dims_t{1, 2});
  CHECK(a[0] == 3.5f);
  CHECK(std::signbit(a[1]));
  CHECK(to_tensor<std::int32_t>(f.at("i32"))[1] == 2147483647);
  CHECK(to_tensor<double>(f.at("i32"))[0] == -7.0);
  CHECK(to_tensor<std::int64_t>(f.at("i64"))[0] == -9000000000);
  CHECK(to_tensor<float>(f.at("u8"))[1] == 200.0f);
  CHECK(to_tensor<std::uint8_t>(f.at("flag"))[0] == 1);
  CHECK(f.at("flag").type == storage_type::boolean);
  CHECK(to_tensor<float>(f.at("empty")).size() == 0);
  CHECK_THROWS_AS(to_tensor<std::int32_t>(f.at("a_f32")), value_error);
}

TEST_CASE("a malformed file throws io_error naming the file and the fault") {
  scratch_dir dir("io");
  struct bad_file {
    const char* what;
    std::vector<char> bytes;
    const char* expected;
  };
  const auto raw = test::raw_safetensors;
  std::vector<char> huge_length = raw(tiny_header, tiny_data);
  huge_length[7] = 0x10;  // header length 2^60
  const std::vector<bad_file> cases = {
      {"empty file", {}, "fewer than the 8"},
      {"five bytes", {1, 0, 0, 0, 0}, "fewer than the 8"},
      {"header length past the end", huge_length, "larger than the"},
      {"header not JSON", raw("{\"w\": nope}", {}), "not valid JSON"},
      {"empty header", raw("", {}), "not valid JSON"},
      {"header a JSON array", raw("[1, 2]", {}), "not a JSON object"},
      {"entry not an object", raw(R"({"w": 3})", {}), "tensor \"w\": its entry is not a JSON object"},
      {"unknown dtype", raw(R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", {0, 0}),
       "unsupported dtype \"F8_E4M3\""},
      {"missing dtype", raw(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", tiny_data), "\"dtype\" is missing"},
      {"unknown field", raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", tiny_data),
       "unknown field \"x\""},
      {"shape and offsets disagree", raw(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", tiny_data),
       "needs 12 bytes"},
      {"shape that overflows",
       raw(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", tiny_data),
       "needs more than 2^64 bytes"},
      {"negative dim", raw(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", tiny_data),
       "not a non-negative integer"},
      {"fractional dim", raw(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", tiny_data),
       "not a non-negative integer"},
      {"offsets past the data", raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", tiny_data),
       "out of range"},
      {"offsets reversed", raw(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", tiny_data), "out of range"},
      {"one offset", raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", tiny_data),
       "not an array of two integers"},
      {"overlapping tensors",
       raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           tiny_data),
       "overlap"},
      {"a gap", raw(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", tiny_data), "belong to no tensor"},
      {"data left over", raw(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", tiny_data),
       "the data section has 8 bytes but the tensors cover 4"},
      {"duplicate names",
       raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
           tiny_data),
       "names \"w\" twice"},
      {"metadata not strings", raw(R"({"__metadata__":{"step":12}})", {}), "metadata \"step\" is not a string"},
      {"metadata not an object", raw(R"({"__metadata__":[]})", {}), "\"__metadata__\" is not a JSON object"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const std::string path = dir.file("bad.safetensors");
    test::write_bytes(path, c.bytes);
    CHECK_THROWS_AS(read_safetensors(path), io_error);
    const std::string msg = message_of([&] { read_safetensors(path); });
    CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains(c.expected));
  }
  CHECK_THAT(message_of([&] { read_safetensors(dir.file("absent.safetensors")); }),
             Catch::Contains("cannot open") && Catch::Contains("absent.safetensors"));
  CHECK_THAT(message_of([&] { read_safetensors(dir.path().string()); }), Catch::Contains("not a regular file"));
}

TEST_CASE("flipped, truncated or garbled bytes of a valid file load cleanly or throw io_error, never crash") {
  scratch_dir dir("io");
  param_store<float> params = small_store<float>();
  const std::string good_path = dir.file("good.safetensors");
  save_safetensors(good_path, params, {{"step", "7"}});
  const std::vector<char> good = test::read_bytes(good_path);
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, good.data(), 8);

  rng gen(2024);
  const std::string path = dir.file("fuzz.safetensors");
  int loaded = 0, rejected = 0, other = 0;
  std::string other_what;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<char> bytes = good;
    switch (trial % 4) {
      case 0:  // flip 1 to 4 bytes, mostly in the header, where the structure is
      case 1:
        for (std::uint64_t k = 0, flips = 1 + gen.below(4); k < flips; ++k) {
          const std::uint64_t limit = gen.below(10) < 8 ? 8 + header_size : bytes.size();
          bytes[gen.below(limit)] ^= static_cast<char>(1 + gen.below(255));
        }
        break;
      case 2:  // truncate
        bytes.resize(gen.below(bytes.size()));
        break;
      case 3:  // replace a header character by a JSON-significant one
        bytes[8 + gen.below(header_size)] = "{}[]\",:0-9e. "[gen.below(13)];
        break;
    }
    test::write_bytes(path, bytes);
    try {
      const tensor_file f = read_safetensors(path);
      param_store<float> into = small_store<float>();
      try {
        load_safetensors(path, into, {.strict = false});
      } catch (const io_error&) {
      }
      for (const auto& [name, s] : f.tensors) (void)to_tensor<double>(s);
      ++loaded;
    } catch (const io_error&) {
      ++rejected;
    } catch (const std::exception& e) {
      ++other;
      other_what = e.what();
    }
  }
  INFO("loaded " << loaded << ", rejected " << rejected << ", last other exception: " << other_what);
  CHECK(other == 0);
  CHECK(rejected > 1000);
  CHECK(loaded > 0);  // flips inside the data are valid files
}

TEMPLATE_TEST_CASE("load_safetensors converts F32 and F64 to the store's type and leaves gradients alone", "", float,
                   double) {
  scratch_dir dir("io");
  tensor_file f;
  f.tensors["w"] = to_stored(tensor<double>({2}, {0.1, -3.0}));
  f.tensors["b"] = to_stored(tensor<float>({1}, {0.25f}));
  write_safetensors(dir.file("f.safetensors"), f);

  param_store<TestType> p;
  p.set("w", tensor<TestType>({2}));
  p.set("b", tensor<TestType>({1}));
  p.grad("w").fill(TestType(5));
  load_safetensors(dir.file("f.safetensors"), p);
  CHECK(p.value("w")[0] == static_cast<TestType>(0.1));
  CHECK(p.value("w")[1] == TestType(-3));
  CHECK(p.value("b")[0] == TestType(0.25));
  CHECK(p.grad("w")[1] == TestType(5));
}

TEST_CASE("a file that does not match the store lists every difference and loads nothing") {
  scratch_dir dir("io");
  tensor_file f;
  f.tensors["a"] = to_stored(tensor<float>({3, 2}));                    // wrong shape
  f.tensors["b"] = to_stored(tensor<std::int32_t>({4}, {1, 2, 3, 4}));  // wrong dtype
  f.tensors["ok"] = to_stored(tensor<float>({2}, {7.0f, 8.0f}));        // fine
  f.tensors["extra"] = to_stored(tensor<float>({1}));                   // not in the store
  write_safetensors(dir.file("m.safetensors"), f);

  param_store<float> p;
  p.set("a", test::random_tensor<float>({2, 3}, 1));
  p.set("b", test::random_tensor<float>({4}, 2));
  p.set("c", test::random_tensor<float>({2}, 3));  // missing from the file
  p.set("ok", test::random_tensor<float>({2}, 4));
  const param_store<float> before = p;

  try {
    load_safetensors(dir.file("m.safetensors"), p);
    FAIL("no exception");
  } catch (const load_mismatch_error& e) {
    CHECK(e.differences.size() == 4);
    CHECK_THAT(std::string(e.what()), Catch::Contains("m.safetensors") && Catch::Contains("4 differences") &&
                                          Catch::Contains("\"a\": shape [3, 2] in the file, [2, 3] in the store") &&
                                          Catch::Contains("\"b\": dtype I32 in the file, expected F32, F64, F16 or BF16") &&
                                          Catch::Contains("missing tensor \"c\"") &&
                                          Catch::Contains("unexpected tensor \"extra\""));
  }
  CHECK(same_values(p, before));

  // Without strict, the extra tensor is no difference — but the others still are.
  CHECK_THROWS_AS(load_safetensors(dir.file("m.safetensors"), p, {.strict = false}), load_mismatch_error);
  CHECK(same_values(p, before));
  CHECK_THROWS_AS(load_safetensors(dir.file("absent.safetensors"), p), io_error);
  CHECK(same_values(p, before));
}

TEST_CASE("extra tensors are ignored when not strict") {
  scratch_dir dir("io");
  tensor_file f;
  f.tensors["w"] = to_stored(tensor<float>({1}, {2.5f}));
  f.tensors["unused"] = to_stored(tensor<float>({3}));
  write_safetensors(dir.file("x.safetensors"), f);
  param_store<float> p;
  p.set("w", tensor<float>({1}));
  load_safetensors(dir.file("x.safetensors"), p, {.strict = false});
  CHECK(p.value("w")[0] == 2.5f);
}

TEST_CASE("saving over a file replaces it whole and leaves no temporary file") {
  scratch_dir dir("io");
  const std::string path = dir.file("p.safetensors");
  param_store<float> a = small_store<float>(), b;
  b.set("other", tensor<float>({5}));
  save_safetensors(path, a);
  save_safetensors(path, b);
  const tensor_file f = read_safetensors(path);
  CHECK(f.tensors.size() == 1);
  CHECK(f.contains("other"));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_CASE("a save that cannot create its temporary file throws io_error and keeps the previous file") {
  scratch_dir dir("io");
  const std::string path = dir.file("p.safetensors");
  const param_store<float> first = small_store<float>();
  save_safetensors(path, first);
  const auto before = test::read_bytes(path);

  std::filesystem::create_directory(path + ".tmp");  // as if the temp file could not be created
  param_store<float> second;
  second.set("w", tensor<float>({2}));
  CHECK_THAT(message_of([&] { save_safetensors(path, second); }),
             Catch::Contains("cannot create") && Catch::Contains("p.safetensors.tmp"));
  CHECK_THROWS_AS(save_safetensors(path, second), io_error);
  CHECK(test::read_bytes(path) == before);
  CHECK(std::filesystem::is_directory(path + ".tmp"));  // not ours: left alone

  CHECK_THROWS_AS(save_safetensors(dir.file("no/such/dir/p.safetensors"), second), io_error);
}

TEST_CASE("a save that fails mid-write (disk full) leaves no temporary file and keeps the previous file") {
  scratch_dir dir("io");
  const std::string path = dir.file("p.safetensors");
  save_safetensors(path, small_store<float>());
  const auto before = test::read_bytes(path);

  // Files may not grow past 4 KiB in this process: a write beyond fails with EFBIG, as on a
  // full disk (SIGXFSZ, which would end the process, is ignored).
  test::file_size_limit limit(4096);
  param_store<float> big;
  big.set("w", tensor<float>({1 << 16}));
  CHECK_THAT(message_of([&] { save_safetensors(path, big); }), Catch::Contains("cannot write"));
  CHECK(test::read_bytes(path) == before);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 1);  // nothing else either
  CHECK(read_safetensors(path).tensors.size() == 3);
}

TEST_CASE(
    "writing rejects duplicate or reserved names and byte counts that do not fit the shape, before touching disk") {
  scratch_dir dir("io");
  const std::string path = dir.file("w.safetensors");
  const std::vector<std::int64_t> shape{2};
  const std::vector<std::byte> eight(8), four(4);
  const std::vector<tensor_bytes_view> duplicate{{"w", storage_type::f32, shape, eight},
                                                 {"w", storage_type::f32, shape, eight}};
  const std::vector<tensor_bytes_view> reserved{{"__metadata__", storage_type::f32, shape, eight}};
  const std::vector<tensor_bytes_view> short_bytes{{"w", storage_type::f32, shape, four}};
  const std::vector<tensor_bytes_view> bad_utf8{{"w\xff", storage_type::f32, shape, eight}};
  CHECK_THROWS_WITH(write_safetensors(path, duplicate), Catch::Contains("two tensors are named \"w\""));
  CHECK_THROWS_WITH(write_safetensors(path, reserved), Catch::Contains("__metadata__"));
  CHECK_THROWS_WITH(write_safetensors(path, short_bytes), Catch::Contains("has 4 bytes") && Catch::Contains("needs 8"));
  CHECK_THROWS_AS(write_safetensors(path, bad_utf8), value_error);
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
}
