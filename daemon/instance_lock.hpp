#pragma once
// One daemon per control socket. `sluiced` takes an exclusive lock on SOCKET.lock (which holds its pid)
// before it binds anything or builds its pipeline, so a second instance on the same socket fails first,
// names the first one's pid, and touches none of its outputs.
#include <string>

namespace sluice {

class InstanceLock {
 public:
  // Takes the lock; throws std::runtime_error naming the holder (its pid) when another process holds the
  // lock or answers on the socket, or naming the lock file and the errno text when it cannot be made.
  explicit InstanceLock(const std::string& socket_path);
  ~InstanceLock();
  InstanceLock(const InstanceLock&) = delete;
  InstanceLock& operator=(const InstanceLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace sluice
