#include "daemon/instance_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace sluice {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// The pid written in a lock file by its holder; empty when unreadable or not a number.
std::string pid_in(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  std::string pid;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) pid += buf[i];
  return pid;
}

// The pid of the process listening on a UNIX socket (SO_PEERCRED of a probe connection); 0 when nothing
// answers (no socket, or a stale one left by a daemon that died), -1 when something answers but its pid
// cannot be known.
long listener_pid(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) return 0;  // the control server reports that path
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  long pid = 0;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
    ucred cred{};
    socklen_t len = sizeof cred;
    pid = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0 ? cred.pid : -1;
  }
  ::close(fd);
  return pid;
}

}  // namespace

InstanceLock::InstanceLock(const std::string& socket_path) : path_(socket_path + ".lock") {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot open the instance lock " + path_ + ": " + errno_text(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = pid_in(fd_);
    ::close(fd_);
    if (err == EWOULDBLOCK)
      throw std::runtime_error("another sluiced" + (pid.empty() ? std::string() : " (pid " + pid + ")") +
                               " holds the control socket " + socket_path + " (lock " + path_ +
                               "); not starting, nothing was touched");
    throw std::runtime_error("cannot lock " + path_ + ": " + errno_text(err));
  }
  // A process that serves the socket without holding the lock (an older sluiced, or something else).
  if (const long pid = listener_pid(socket_path); pid != 0) {
    ::close(fd_);
    throw std::runtime_error("control socket " + socket_path + " is in use" +
                             (pid > 0 ? " by pid " + std::to_string(pid) : std::string()) +
                             "; not starting, nothing was touched");
  }
  const std::string text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const int err = errno;
    ::close(fd_);
    throw std::runtime_error("cannot write the pid into " + path_ + ": " + errno_text(err));
  }
}

// The file stays: removing it would let a third instance lock a new file while a second still holds the old.
InstanceLock::~InstanceLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace sluice
