// Files written whole or not at all (see atomic_file.hpp).
#include "atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "loom/core/errors.hpp"
#include "text.hpp"

namespace loom::detail {

namespace {


std::string directory_of(const std::string& path) {
  const auto dir = std::filesystem::path(path).parent_path();
  return dir.empty() ? "." : dir.string();
}

}  // namespace

atomic_file::atomic_file(std::string path, std::string_view who)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), who_(who) {
  // An unnamed file is linked later through /proc/self/fd: without /proc, or without O_TMPFILE
  // support in the file system, write the named temporary file directly.
  if (::access("/proc/self/fd", X_OK) == 0)
    fd_ = ::open(directory_of(path_).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  else
    errno = EOPNOTSUPP;
  if (fd_ < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    named_ = true;
  }
  if (fd_ < 0) fail("cannot create", named_ ? tmp_ : tmp_ + " (unnamed, in its directory)");
}

atomic_file::~atomic_file() {
  if (fd_ >= 0) ::close(fd_);
  if (named_ && !committed_) ::unlink(tmp_.c_str());
}

void atomic_file::fail(const std::string& what, const std::string& file) const {
  throw io_error(who_ + ": " + what + " " + in_quotes(file) + ": " + std::strerror(errno));
}

void atomic_file::write(const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("cannot write", tmp_);
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void atomic_file::commit() {
  if (::fsync(fd_) != 0) fail("cannot sync", tmp_);
  if (!named_) {
    // Give the unnamed file the temporary name. A regular file of that name is a leftover of
    // a save killed just before its rename: replace it. Anything else is not ours: fail.
    struct stat st {};
    if (::lstat(tmp_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::unlink(tmp_.c_str());
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp_.c_str(), AT_SYMLINK_FOLLOW) != 0) fail("cannot create", tmp_);
    named_ = true;  // from here on the destructor removes it unless the rename succeeds
  }
  // the rename right after the link: the window in which a kill leaves path.tmp is two syscalls
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot rename " + in_quotes(tmp_) + " to", path_);
  committed_ = true;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", path_);
  // Make the rename itself durable (best effort: some file systems refuse to sync directories).
  const int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomically(const std::string& path, std::string_view content, std::string_view who) {
  atomic_file out(path, who);
  out.write(content.data(), content.size());
  out.commit();
}

}  // namespace loom::detail
