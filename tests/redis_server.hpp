#pragma once
// A redis-server of the test's own, on a free loopback port, in a temp dir (no RDB snapshots; with
// `persistent`, an append-only file fsync'ed at every write, so a restart keeps every acknowledged write).
// Started by the constructor (throws when it cannot be reached within 10 s), stopped (SIGTERM, then SIGKILL
// after 5 s) by stop() and the destructor. With `tls`, it takes only TLS connections (rediss://), on 127.0.0.1
// and 127.0.0.2, and wants a client certificate signed by the CA.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/redis_client.hpp"
#include "server_process.hpp"
#include "temp_dir.hpp"

namespace sluice::test {

class RedisServer {
 public:
  struct Tls {
    std::string ca, server_cert, server_key;  // the server's certificate and key; the CA that signed the clients'
    std::string client_cert, client_key;      // what endpoint() hands clients
  };
  explicit RedisServer(bool persistent = false, std::optional<Tls> tls = std::nullopt)
      : dir_("sluice-redis"), persistent_(persistent), tls_(std::move(tls)) {
    port_ = free_loopback_port();
    start();
  }
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string uri(const std::string& stream) const {
    return (tls_ ? "rediss://127.0.0.1:" : "redis://127.0.0.1:") + std::to_string(port_) + "/" + stream;
  }
  redis::Endpoint endpoint() const {
    redis::Endpoint e;
    e.port = port_;
    if (tls_) {
      e.tls = true;
      e.tls_ca_file = tls_->ca;
      e.tls_cert_file = tls_->client_cert;
      e.tls_key_file = tls_->client_key;
    }
    return e;
  }

  void start() {
    const std::string port = std::to_string(port_), dir = dir_.path.string();
    std::vector<std::string> args{"redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "",
                                  "--daemonize", "no", "--loglevel", "warning", "--logfile", dir + "/redis.log"};
    if (tls_)
      args.insert(args.end(), {"--port", "0", "--tls-port", port, "--bind", "127.0.0.1 127.0.0.2", "--tls-cert-file",
                               tls_->server_cert, "--tls-key-file", tls_->server_key, "--tls-ca-cert-file", tls_->ca,
                               "--tls-auth-clients", "yes"});
    if (persistent_) args.insert(args.end(), {"--appendonly", "yes", "--appendfsync", "always"});
    else args.insert(args.end(), {"--appendonly", "no"});
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    await_serving(
        pid_,
        [&] {
          try {
            redis::Client c(endpoint());
            return c.command({"PING"}).str == "PONG";
          } catch (const redis::RedisError&) {
            return false;
          }
        },
        "redis-server exited at start (is it installed? scripts/setup.sh)",
        "redis-server did not answer on port " + std::to_string(port_) + " within 10 s");
  }

  void stop() { stop_process(pid_); }

 private:
  TempDir dir_;
  bool persistent_;
  std::optional<Tls> tls_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace sluice::test
