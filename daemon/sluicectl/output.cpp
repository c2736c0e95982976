#include "daemon/sluicectl/output.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace sluice::ctl {

bool write_fully(int fd, const std::string& data) {
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {
      errno = EIO;
      return false;
    }
    off += static_cast<std::size_t>(n);
  }
  return true;
}

std::string TraceOutput::open(const std::string& file) {
  file_ = file;
  if (file == "-") return "";
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return file + " is a directory";
  const std::filesystem::path p(file);
  if (!p.has_filename()) return file + " is not a file name";
  std::string dir = p.parent_path().string();
  if (dir.empty()) dir = ".";
  std::string tmpl = (p.parent_path() / ("." + p.filename().string() + ".tmp-XXXXXX")).string();
  fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd_ < 0) return "cannot create a file in " + dir + ": " + std::strerror(errno);
  tmp_ = tmpl;
  const mode_t mask = ::umask(0);  // mkostemp makes 0600; give FILE the mode a plain create would
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
  return "";
}

std::string TraceOutput::commit(const std::string& data) {
  if (file_ == "-") {
    std::fflush(stdout);
    if (!write_fully(STDOUT_FILENO, data)) return std::string("cannot write to stdout: ") + std::strerror(errno);
    return "";
  }
  if (!write_fully(fd_, data)) return "cannot write " + tmp_ + ": " + std::strerror(errno);
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS)
    return "cannot write " + tmp_ + ": " + std::strerror(errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return "cannot write " + tmp_ + ": " + std::strerror(errno);
  if (::rename(tmp_.c_str(), file_.c_str()) != 0)
    return "cannot rename " + tmp_ + " to " + file_ + ": " + std::strerror(errno);
  tmp_.clear();
  return "";
}

void TraceOutput::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
}

}  // namespace sluice::ctl
