#include "runtime/bounded_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace sluice {

std::string file_kind(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string describe_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 5) value /= 1024.0, ++unit;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f %s", value, units[unit]);
  return buf;
}

BoundedFile::BoundedFile(const std::string& path, const std::string& what, std::size_t limit)
    : path_(path), what_(what), limit_(limit) {
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer; it is refused below by its type.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd_ < 0) {
    const int err = errno;
    throw FileReadError(path_ + ": cannot open " + what_ + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw FileReadError(path_ + ": cannot stat " + what_ + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw FileReadError(path_ + ": " + what_ + " is " + file_kind(st.st_mode) + ", not a regular file");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
  if (size_ > limit_) {
    ::close(fd_);
    throw FileReadError(path_ + ": " + what_ + " is " + describe_bytes(size_) + " (" + std::to_string(size_) +
                        " bytes), over the limit of " + describe_bytes(limit_));
  }
}

BoundedFile::~BoundedFile() {
  if (fd_ >= 0) ::close(fd_);
}

BoundedFile::BoundedFile(BoundedFile&& other) noexcept
    : path_(std::move(other.path_)), what_(std::move(other.what_)), limit_(other.limit_), fd_(other.fd_),
      size_(other.size_) {
  other.fd_ = -1;
}

std::string BoundedFile::read_all() {
  // Read up to limit + 1 bytes: a file that grew since fstat is noticed without reading it all.
  std::string bytes(static_cast<std::size_t>(size_), '\0');
  std::size_t used = 0;
  for (;;) {
    if (used == bytes.size()) {
      if (bytes.size() > limit_) break;
      bytes.resize(std::min<std::size_t>(limit_ + 1, std::max<std::size_t>(bytes.size() * 2, 4096)));
    }
    const ssize_t got = ::pread(fd_, bytes.data() + used, bytes.size() - used, static_cast<off_t>(used));
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw FileReadError(path_ + ": reading " + what_ + " failed: " + std::strerror(err));
    }
    if (got == 0) break;
    used += static_cast<std::size_t>(got);
  }
  if (used > limit_)
    throw FileReadError(path_ + ": " + what_ + " grew past the limit of " + describe_bytes(limit_) + " while being read");
  bytes.resize(used);
  return bytes;
}

std::string BoundedFile::read_range(std::uint64_t offset, std::uint64_t length) {
  if (offset > size_ || length > size_ - offset)
    throw FileReadError(path_ + ": " + what_ + " is " + std::to_string(size_) + " bytes; the range at offset " +
                        std::to_string(offset) + " of " + std::to_string(length) + " bytes lies outside it");
  std::string bytes(static_cast<std::size_t>(length), '\0');
  std::size_t used = 0;
  while (used < bytes.size()) {
    const ssize_t got =
        ::pread(fd_, bytes.data() + used, bytes.size() - used, static_cast<off_t>(offset + used));
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw FileReadError(path_ + ": reading " + what_ + " failed: " + std::strerror(err));
    }
    if (got == 0)
      throw FileReadError(path_ + ": " + what_ + " ended at " + std::to_string(offset + used) +
                          " bytes while reading; it was truncated while being read");
    used += static_cast<std::size_t>(got);
  }
  return bytes;
}

std::string read_bounded_file(const std::string& path, const std::string& what, std::size_t limit) {
  BoundedFile file(path, what, limit);
  return file.read_all();
}

std::uint64_t host_memory_bytes() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
}

}  // namespace sluice
