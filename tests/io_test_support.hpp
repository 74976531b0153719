// Helpers for the file tests: a scratch directory and raw file bytes.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace test {

/// A fresh directory under the system's temporary directory, removed with its contents at the
/// end of the scope. Unique per process and per instance (CTest runs test cases in parallel).
class scratch_dir {
 public:
  explicit scratch_dir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("loom-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  /// The path of a file in this directory.
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// Within its scope, files this process writes may not grow past `bytes`: writes beyond fail
/// with EFBIG, as on a full disk (SIGXFSZ is ignored meanwhile).
class file_size_limit {
 public:
  explicit file_size_limit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = old_;
    lowered.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lowered);
  }
  file_size_limit(const file_size_limit&) = delete;
  file_size_limit& operator=(const file_size_limit&) = delete;
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
};

inline std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A safetensors file from its parts: the u64 little-endian header length, the header text as
/// given (not checked), then the data bytes.
inline std::vector<char> raw_safetensors(const std::string& header, const std::vector<char>& data = {}) {
  std::vector<char> bytes(8 + header.size() + data.size());
  const std::uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  std::copy(header.begin(), header.end(), bytes.begin() + 8);
  std::copy(data.begin(), data.end(), bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return bytes;
}

/// The little-endian bytes of values (the host is little-endian; loom checks it).
template <class V>
std::vector<char> le_bytes(std::initializer_list<V> values) {
  std::vector<char> bytes(values.size() * sizeof(V));
  std::memcpy(bytes.data(), std::data(values), bytes.size());
  return bytes;
}

inline std::vector<char> concat_bytes(std::initializer_list<std::vector<char>> parts) {
  std::vector<char> r;
  for (const auto& p : parts) r.insert(r.end(), p.begin(), p.end());
  return r;
}

}  // namespace test
