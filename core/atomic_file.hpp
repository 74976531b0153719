// A file written whole or not at all: safetensors files, checkpoints, plots. Private to the
// library (core/; io/ and train/ use it).
//
// The bytes go to an unnamed file in the target's directory (Linux's O_TMPFILE), which is
// fsync'ed, linked as `path + ".tmp"` and renamed over `path`; then the directory is synced.
// A process killed while writing leaves nothing behind (the unnamed file dies with it); killed
// between the link and the rename (a few microseconds) it leaves a complete `path.tmp`, which
// the next write of `path` replaces. Readers of `path` see the old file or the new one, never
// a part. Where O_TMPFILE is not supported, the bytes go to `path.tmp` directly (then a kill
// while writing leaves a partial `path.tmp`, replaced by the next write).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace loom::detail {

class atomic_file {
 public:
  /// Opens the unnamed file; `who` starts error messages ("write_safetensors"). Throws io_error
  /// if it cannot be created.
  atomic_file(std::string path, std::string_view who);
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;
  /// Closes and discards the file unless commit() succeeded.
  ~atomic_file();
  /// Appends bytes; throws io_error (disk full, say).
  void write(const void* data, std::size_t n);
  /// Makes the file `path`: fsync, link, rename, sync of the directory. Throws io_error; the
  /// previous `path` is untouched then.
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& file) const;
  std::string path_, tmp_, who_;
  int fd_ = -1;
  bool named_ = false;  // the data is already in tmp_ (no O_TMPFILE)
  bool committed_ = false;
};

/// Writes `content` to `path` through an atomic_file.
void write_file_atomically(const std::string& path, std::string_view content, std::string_view who);

}  // namespace loom::detail
