#include "runtime/output_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

namespace sluice {
namespace fs = std::filesystem;

fs::path OutputLock::for_directory(const fs::path& dir) { return dir / ".sluice-lock"; }

fs::path OutputLock::for_file(const fs::path& file) {
  return file.parent_path() / ("." + file.filename().string() + ".sluice-lock");
}

long OutputLock::holder_pid(const fs::path& lock_file) {
  const int fd = ::open(lock_file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return 0;
  char buf[32] = {};
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  long pid = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9' && pid < 100'000'000; ++i) pid = pid * 10 + (buf[i] - '0');
  return pid;
}

OutputLock::OutputLock(const fs::path& lock_file, const std::string& what, std::chrono::milliseconds same_process_wait,
                       const std::atomic<bool>* stop)
    : path_(lock_file) {
  // O_CREAT without O_TRUNC: opening a lock someone holds changes nothing in it.
  fd_ = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    throw std::runtime_error(what + ": cannot open the lock file '" + lock_file.string() + "': " + std::strerror(errno));
  const auto give_up = std::chrono::steady_clock::now() + same_process_wait;
  bool said = false;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    if (err != EWOULDBLOCK) {
      release();
      throw std::runtime_error(what + ": cannot lock '" + lock_file.string() + "': " + std::strerror(err));
    }
    const long pid = holder_pid(lock_file);
    const bool ours = pid == static_cast<long>(::getpid());
    const bool stopping = stop && stop->load(std::memory_order_relaxed);
    if (!ours || stopping || std::chrono::steady_clock::now() >= give_up) {
      release();
      const std::string holder = pid > 0 ? "pid " + std::to_string(pid) : "a process that has not written its pid yet";
      throw std::runtime_error(what + " is in use by " + (ours ? "another pipeline of this sluiced (" : "another sluiced (") +
                               holder + ", lock '" + lock_file.string() + "')");
    }
    if (!said) {
      spdlog::info("{}: waiting for the pipeline of this process that still holds it to finish", what);
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Ours now: say who holds it. A failure here only costs the name in the other side's message.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    spdlog::warn("{}: cannot write the pid into '{}': {}", what, lock_file.string(), std::strerror(errno));
}

OutputLock::OutputLock(OutputLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}

OutputLock& OutputLock::operator=(OutputLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

OutputLock::~OutputLock() { release(); }

void OutputLock::release() noexcept {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
}

}  // namespace sluice
