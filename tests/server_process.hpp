#pragma once
// What the tests' own servers (tests/redis_server.hpp, tests/mosquitto_broker.hpp) share: a free loopback port,
// waiting for a started server to serve, and stopping it.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace sluice::test {

// A loopback port nothing listens on now (the kernel's pick, released at once).
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot find a free loopback port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// SIGTERM, then SIGKILL after 5 s; pid becomes -1. Nothing to do for pid <= 0.
inline void stop_process(pid_t& pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 500; ++i) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) {
      pid = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  pid = -1;
}

// Polls serving() every 20 ms until it is true. Throws `exited` when the process ended meanwhile (pid -1), and
// `too_slow` after 10 s (the process stopped first).
template <typename Serving>
void await_serving(pid_t& pid, Serving serving, const std::string& exited, const std::string& too_slow) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!serving()) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pid = -1;
      throw std::runtime_error(exited);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      stop_process(pid);
      throw std::runtime_error(too_slow);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace sluice::test
