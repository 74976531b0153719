// A file from outside opened for reading: a regular file (not a folder, a pipe or a device),
// closed by the destructor, with its size as the open file has it. Private to io/.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "../core/text.hpp"
#include "loom/core/errors.hpp"

namespace loom {

class regular_file {
 public:
  /// Opens `path`. Throws io_error: "<who>cannot open "path": <why>", "<who>"path": cannot
  /// stat: <why>" or "<who>"path" is not a regular file".
  regular_file(const std::string& path, const std::string& who) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw io_error(who + "cannot open " + in_quotes(path) + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int e = errno;
      ::close(fd_);
      throw io_error(who + in_quotes(path) + ": cannot stat: " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw io_error(who + in_quotes(path) + " is not a regular file");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  ~regular_file() { ::close(fd_); }
  regular_file(const regular_file&) = delete;
  regular_file& operator=(const regular_file&) = delete;

  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }

 private:
  int fd_;
  std::uint64_t size_ = 0;
};

}  // namespace loom
