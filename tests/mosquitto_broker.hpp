#pragma once
// A mosquitto broker of the test's own, on a free loopback port, with its config, persistence file and log in a
// temp dir, and an MQTT subscriber (libmosquitto's threaded client) that collects what it receives.
//
// The broker persists sessions and queued messages (written when it stops: stop() sends SIGTERM), queues any
// number of messages for an offline subscriber (max_queued_messages 0: the default 1000 would drop some while a
// slow subscriber catches up), and optionally wants a user and password. Started by the constructor (throws
// when it does not take connections within 10 s), stopped (SIGTERM, then SIGKILL after 5 s) by stop() and the
// destructor.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <mosquitto.h>

#include "server_process.hpp"
#include "temp_dir.hpp"

namespace sluice::test {

class MosquittoBroker {
 public:
  // `user`/`password` non-empty: anonymous clients are refused, that one is let in.
  explicit MosquittoBroker(const std::string& user = "", const std::string& password = "") : dir_("sluice-mqtt") {
    port_ = free_loopback_port();
    std::ofstream conf(dir_.path / "mosquitto.conf");
    conf << "listener " << port_ << " 127.0.0.1\n"
         << "persistence true\npersistence_location " << dir_.str() << "/\n"
         << "autosave_interval 0\nmax_queued_messages 0\n"
         << "log_dest file " << dir_.str() << "/mosquitto.log\nlog_type error\nlog_type warning\n";
    // As root mosquitto would switch to the user `mosquitto`, who may not write the temp dir.
    if (const passwd* pw = ::getpwuid(::geteuid())) conf << "user " << pw->pw_name << "\n";
    if (user.empty()) {
      conf << "allow_anonymous true\n";
    } else {
      const std::string file = dir_.str() + "/passwords";
      const std::string cmd = "mosquitto_passwd -c -b '" + file + "' '" + user + "' '" + password + "' >/dev/null 2>&1";
      if (std::system(cmd.c_str()) != 0) throw std::runtime_error("mosquitto_passwd failed (is mosquitto installed?)");
      conf << "allow_anonymous false\npassword_file " << file << "\n";
    }
    conf.close();
    start();
  }
  ~MosquittoBroker() { stop(); }
  MosquittoBroker(const MosquittoBroker&) = delete;
  MosquittoBroker& operator=(const MosquittoBroker&) = delete;

  int port() const { return port_; }
  std::string uri(const std::string& topic) const { return "mqtt://127.0.0.1:" + std::to_string(port_) + "/" + topic; }

  void start() {
    // Built before fork(): the child of a process with threads (the subscriber's) must not allocate.
    const std::string conf = dir_.str() + "/mosquitto.conf", log_path = dir_.str() + "/stderr.log";
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      // Its own words (such as the warning about running as root) go to its log, not the test's output.
      const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (log >= 0) {
        ::dup2(log, 1);
        ::dup2(log, 2);
      }
      ::execlp("mosquitto", "mosquitto", "-c", conf.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    await_serving(
        pid_, [&] { return accepts(); },
        "mosquitto exited at start (is it installed? scripts/setup.sh; log: " + dir_.str() + ")",
        "mosquitto did not take connections on port " + std::to_string(port_) + " within 10 s");
  }

  void stop() { stop_process(pid_); }

 private:
  bool accepts() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port_));
    const bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (fd >= 0) ::close(fd);
    return ok;
  }
  TempDir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// A subscriber to `filter` at QoS 1 with a persistent session (clean session off, a fixed client id): while it
// or the broker is away, the broker keeps its subscription and queues its messages. Reconnects by itself
// (libmosquitto's thread). Collects every message in arrival order, duplicates included.
class Subscriber {
 public:
  struct Received {
    std::string topic, payload;
  };

  Subscriber(int port, std::string filter, const std::string& client_id) : filter_(std::move(filter)) {
    mosquitto_lib_init();
    mosq_ = mosquitto_new(client_id.c_str(), false, this);
    if (!mosq_) throw std::runtime_error("mosquitto_new failed");
    mosquitto_connect_callback_set(mosq_, [](mosquitto* m, void* self, int rc) {
      auto* s = static_cast<Subscriber*>(self);
      if (rc == 0) mosquitto_subscribe(m, nullptr, s->filter_.c_str(), 1);
    });
    mosquitto_subscribe_callback_set(mosq_, [](mosquitto*, void* self, int, int, const int*) {
      auto* s = static_cast<Subscriber*>(self);
      std::lock_guard lock(s->mu_);
      s->subscribed_ = true;
      s->cv_.notify_all();
    });
    mosquitto_message_callback_set(mosq_, [](mosquitto*, void* self, const mosquitto_message* m) {
      auto* s = static_cast<Subscriber*>(self);
      std::lock_guard lock(s->mu_);
      s->received_.push_back({m->topic, std::string(static_cast<const char*>(m->payload), static_cast<std::size_t>(m->payloadlen))});
      s->cv_.notify_all();
    });
    mosquitto_reconnect_delay_set(mosq_, 1, 1, false);
    // Its thread (which inherits this mask) writes to a broker the tests stop: SIGPIPE stays blocked there.
    sigset_t pipe, old;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old);
    const bool started = mosquitto_connect_async(mosq_, "127.0.0.1", port, 30) == MOSQ_ERR_SUCCESS &&
                         mosquitto_loop_start(mosq_) == MOSQ_ERR_SUCCESS;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (!started) throw std::runtime_error("the subscriber cannot connect to port " + std::to_string(port));
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(10), [&] { return subscribed_; }))
      throw std::runtime_error("the subscriber was not subscribed within 10 s");
  }
  ~Subscriber() {
    // DISCONNECT may be written to a broker a test stopped: SIGPIPE blocked, and taken off again if raised.
    sigset_t pipe, old;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old);
    mosquitto_disconnect(mosq_);
    mosquitto_loop_stop(mosq_, true);
    mosquitto_destroy(mosq_);
    sigset_t pending;
    sigpending(&pending);
    const timespec none{0, 0};
    if (sigismember(&pending, SIGPIPE) == 1) sigtimedwait(&pipe, nullptr, &none);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // Waits (at most `limit`) until `done(received)` holds; returns a copy of what was received.
  template <class Done>
  std::vector<Received> wait_until(Done done, std::chrono::seconds limit = std::chrono::seconds(30)) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, limit, [&] { return done(received_); });
    return received_;
  }
  std::vector<Received> received() {
    std::lock_guard lock(mu_);
    return received_;
  }

 private:
  std::string filter_;
  mosquitto* mosq_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  bool subscribed_ = false;
  std::vector<Received> received_;
};

}  // namespace sluice::test
