#include "runtime/output_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

namespace sluice {
namespace fs = std::filesystem;

namespace {

// Locks reserved for a pipeline that has not opened its outputs yet, by the lock file's inode: the descriptor
// that holds the flock waits here until the sink's OutputLock takes it over.
struct Reserved {
  int fd;
  std::uint64_t token;
};
struct Reservations {
  std::mutex mu;
  std::map<std::pair<dev_t, ino_t>, Reserved> by_inode;
  std::uint64_t next_token = 1;
};
Reservations& reservations() {
  static Reservations r;
  return r;
}

std::optional<std::pair<dev_t, ino_t>> inode_of(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::nullopt;
  return std::make_pair(st.st_dev, st.st_ino);
}

// The reserved descriptor of the lock file open on `fd` (same inode), taken out of the reservations; -1 if none.
int take_reserved(int fd) {
  const auto inode = inode_of(fd);
  if (!inode) return -1;
  Reservations& r = reservations();
  std::lock_guard lock(r.mu);
  const auto it = r.by_inode.find(*inode);
  if (it == r.by_inode.end()) return -1;
  const int reserved = it->second.fd;
  r.by_inode.erase(it);
  return reserved;
}

void write_pid(int fd, const std::string& what, const fs::path& lock_file) {
  // Written over the old pid, then cut to length: a reader never finds the file empty (holder_pid stops at the
  // '\n'), only the old pid or the new one. A failure here only costs the name in the other side's message.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()) ||
      ::ftruncate(fd, static_cast<off_t>(pid.size())) != 0)
    spdlog::warn("{}: cannot write the pid into '{}': {}", what, lock_file.string(), std::strerror(errno));
}

// The holder's pid; a lock taken a moment ago may not have it written yet (a new lock file), so an empty one is
// read again for a little while before it counts as unknown (0).
long holder_pid_settled(const fs::path& lock_file) {
  for (int tries = 0;; ++tries) {
    const long pid = OutputLock::holder_pid(lock_file);
    if (pid != 0 || tries == 20) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string in_use_message(const std::string& what, const fs::path& lock_file, long pid, bool ours) {
  const std::string holder = pid > 0 ? "pid " + std::to_string(pid) : "a process that has not written its pid yet";
  return what + " is in use by " + (ours ? "another pipeline of this sluiced (" : "another sluiced (") + holder +
         ", lock '" + lock_file.string() + "')";
}

}  // namespace

OutputLockReservation::OutputLockReservation(const fs::path& lock_file, const std::string& what) {
  const int fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    throw std::runtime_error(what + ": cannot open the lock file '" + lock_file.string() + "': " + std::strerror(errno));
  int rc;
  do rc = ::flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    if (err != EWOULDBLOCK)
      throw std::runtime_error(what + ": cannot lock '" + lock_file.string() + "': " + std::strerror(err));
    const long pid = holder_pid_settled(lock_file);
    if (pid == static_cast<long>(::getpid())) return;  // the running generation's: its sink waits for it
    throw OutputInUse(in_use_message(what, lock_file, pid, false));
  }
  const auto inode = inode_of(fd);
  if (!inode) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error(what + ": cannot stat the lock file '" + lock_file.string() + "': " + std::strerror(err));
  }
  write_pid(fd, what, lock_file);
  Reservations& r = reservations();
  std::lock_guard lock(r.mu);
  token_ = r.next_token++;
  r.by_inode[*inode] = Reserved{fd, token_};
}

OutputLockReservation::OutputLockReservation(OutputLockReservation&& o) noexcept : token_(std::exchange(o.token_, 0)) {}

OutputLockReservation::~OutputLockReservation() {
  if (token_ == 0) return;
  Reservations& r = reservations();
  std::lock_guard lock(r.mu);
  for (auto it = r.by_inode.begin(); it != r.by_inode.end(); ++it)
    if (it->second.token == token_) {
      ::close(it->second.fd);
      r.by_inode.erase(it);
      return;
    }
}

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
  if (const int reserved = take_reserved(fd_); reserved >= 0) {  // locked for this pipeline before it started
    ::close(std::exchange(fd_, reserved));
    return;
  }
  const auto give_up = std::chrono::steady_clock::now() + same_process_wait;
  bool said = false;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    if (err != EWOULDBLOCK) {
      release();
      throw std::runtime_error(what + ": cannot lock '" + lock_file.string() + "': " + std::strerror(err));
    }
    const long pid = holder_pid_settled(lock_file);
    const bool ours = pid == static_cast<long>(::getpid());
    const bool stopping = stop && stop->load(std::memory_order_relaxed);
    if (!ours || stopping || std::chrono::steady_clock::now() >= give_up) {
      release();
      throw OutputInUse(in_use_message(what, lock_file, pid, ours));
    }
    if (!said) {
      spdlog::info("{}: waiting for the pipeline of this process that still holds it to finish", what);
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  write_pid(fd_, what, lock_file);  // ours now: say who holds it
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
