#include "runtime/mqtt_client.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include <mosquitto.h>

namespace sluice::mqtt {
namespace {

std::string random_client_id() {
  std::mt19937_64 rng{std::random_device{}()};
  char id[24];
  std::snprintf(id, sizeof id, "sluice-%016llx", static_cast<unsigned long long>(rng()));
  return id;  // 23 characters: the most every MQTT 3.1.1 broker must accept
}

// The text of a libmosquitto return code (errno's for MOSQ_ERR_ERRNO, read before anything else can change it).
std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

std::string error_text(int rc, int err) {
  std::string text = rc == MOSQ_ERR_ERRNO ? std::strerror(err) : mosquitto_strerror(rc);
  if (!text.empty() && text.back() == '.') text.pop_back();  // some of libmosquitto's texts end in a full stop
  return text;
}

// libmosquitto writes with write(), so a broker that went away would raise SIGPIPE and kill the process. While a
// guard lives, SIGPIPE is blocked on this thread; one raised meanwhile is taken off again (the write's EPIPE is
// what tells us), unless it was pending before.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec none{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &none) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

}  // namespace

Client::Client(ClientOptions options) : options_(std::move(options)) {
  static std::once_flag init;
  std::call_once(init, [] { mosquitto_lib_init(); });
  if (options_.client_id.empty()) options_.client_id = random_client_id();
}

Client::~Client() { disconnect(); }

std::string Client::describe() const {
  const std::string host = options_.host.find(':') != std::string::npos ? "[" + options_.host + "]" : options_.host;
  return "MQTT broker " + host + ":" + std::to_string(options_.port) + " (client id " + options_.client_id + ")";
}

void Client::on_connect(struct mosquitto*, void* self, int rc) { static_cast<Client*>(self)->connack_ = rc; }

void Client::on_disconnect(struct mosquitto*, void* self, int) { static_cast<Client*>(self)->connected_ = false; }

void Client::on_publish(struct mosquitto*, void* self, int mid) {
  static_cast<Client*>(self)->acknowledged_.insert(mid);
}

void Client::lost(const std::string& what, int rc) {
  const std::string text = error_text(rc, errno);
  disconnect();
  throw MqttError(MqttError::Kind::connection, describe() + ": " + what + ": " + text);
}

void Client::connect() {
  const SigpipeGuard guard;
  disconnect();
  mosq_ = mosquitto_new(options_.client_id.c_str(), true, this);
  if (!mosq_) throw MqttError(MqttError::Kind::connection, describe() + ": cannot create a client: " + std::strerror(errno));
  mosquitto_int_option(mosq_, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311);
  // Each small PUBLISH goes out at once instead of waiting (Nagle) for the TCP ACK of the one before.
  mosquitto_int_option(mosq_, MOSQ_OPT_TCP_NODELAY, 1);
  mosquitto_max_inflight_messages_set(mosq_, 0);  // publish()'s window is the bound
  mosquitto_connect_callback_set(mosq_, &Client::on_connect);
  mosquitto_disconnect_callback_set(mosq_, &Client::on_disconnect);
  mosquitto_publish_callback_set(mosq_, &Client::on_publish);
  if (!options_.username.empty() &&
      mosquitto_username_pw_set(mosq_, options_.username.c_str(),
                                options_.password.empty() ? nullptr : options_.password.c_str()) != MOSQ_ERR_SUCCESS) {
    disconnect();
    throw MqttError(MqttError::Kind::refused, describe() + ": the user name is not valid UTF-8");
  }
  connack_ = -1;
  // Non-blocking: the TCP connect and the CONNACK are waited for below, bounded by connect_timeout_s.
  const int rc = mosquitto_connect_async(mosq_, options_.host.c_str(), options_.port, options_.keepalive_s);
  if (rc == MOSQ_ERR_INVAL) {
    disconnect();
    throw MqttError(MqttError::Kind::refused, describe() + ": libmosquitto refused the host, port or keepalive");
  }
  if (rc != MOSQ_ERR_SUCCESS) lost("cannot connect", rc);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.connect_timeout_s);
  while (connack_ < 0) {
    const int loop = mosquitto_loop(mosq_, 100, 1);
    if (connack_ >= 0) break;  // a refusal comes with an error from the loop: the CONNACK's code says more
    if (loop != MOSQ_ERR_SUCCESS) lost("cannot connect", loop);
    if (connack_ < 0 && std::chrono::steady_clock::now() > deadline) {
      disconnect();
      throw MqttError(MqttError::Kind::connection,
                      describe() + ": no answer to CONNECT within " + seconds(options_.connect_timeout_s));
    }
  }
  if (connack_ != 0) {
    const int code = connack_;
    std::string text = mosquitto_connack_string(code);
    if (!text.empty() && text.back() == '.') text.pop_back();
    disconnect();
    // 3: "server unavailable" may pass; the others (protocol, identifier, credentials, not authorised) will not.
    throw MqttError(code == 3 ? MqttError::Kind::connection : MqttError::Kind::refused,
                    describe() + ": the broker refused the connection: " + text);
  }
  // Also on the socket itself: cheap, and independent of which of the library's connect paths applied the option.
  const int on = 1;
  if (const int fd = mosquitto_socket(mosq_); fd >= 0) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  connected_ = true;
}

// A broker that leaves Nagle on (Mosquitto's default, set_tcp_nodelay false) holds its second PUBACK back until
// our TCP ACK of the first, which Linux delays by up to 40 ms: every window of messages in flight would wait that
// long (a batch of 16 took 44 ms on loopback). Quick-ACK mode, which the kernel leaves again by itself, is set
// before each read, and again after it (which sends an ACK the kernel was holding back at once).
void Client::quick_ack() noexcept {
  const int fd = mosquitto_socket(mosq_);
  const int on = 1;
  if (fd >= 0) ::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &on, sizeof on);
}

void Client::disconnect() noexcept {
  if (!mosq_) return;
  const SigpipeGuard guard;
  if (connected_) mosquitto_disconnect(mosq_);
  mosquitto_destroy(mosq_);
  mosq_ = nullptr;
  connected_ = false;
  acknowledged_.clear();
}

void Client::publish(const std::vector<Message>& messages, std::vector<char>& done, int qos, std::size_t window,
                     double stall_s) {
  const SigpipeGuard guard;
  if (!connected()) throw MqttError(MqttError::Kind::connection, describe() + ": not connected");
  window = std::max<std::size_t>(window, 1);
  std::map<int, std::size_t> in_flight;  // message id -> index
  std::size_t next = 0;
  auto last_progress = std::chrono::steady_clock::now();
  for (;;) {
    while (in_flight.size() < window && next < messages.size()) {
      if (done[next]) {
        ++next;
        continue;
      }
      const Message& m = messages[next];
      int mid = 0;
      const int rc = mosquitto_publish(mosq_, &mid, m.topic.c_str(), static_cast<int>(m.payload.size()),
                                       m.payload.data(), qos, false);
      if (rc == MOSQ_ERR_NO_CONN || rc == MOSQ_ERR_CONN_LOST || rc == MOSQ_ERR_ERRNO) lost("publishing", rc);
      if (rc != MOSQ_ERR_SUCCESS) {
        const std::string text = error_text(rc, errno);
        disconnect();
        throw MqttError(MqttError::Kind::message, describe() + ": a message of " + std::to_string(m.payload.size()) +
                                                      " bytes was refused: " + text);
      }
      in_flight[mid] = next++;
    }
    // Acknowledgements, including any the library reported from inside mosquitto_publish (QoS 0).
    for (const int mid : acknowledged_) {
      const auto it = in_flight.find(mid);
      if (it == in_flight.end()) continue;
      done[it->second] = 1;
      in_flight.erase(it);
      last_progress = std::chrono::steady_clock::now();
    }
    acknowledged_.clear();
    if (in_flight.empty() && next >= messages.size()) return;
    quick_ack();
    const int rc = mosquitto_loop(mosq_, 100, 1);
    quick_ack();
    if (rc != MOSQ_ERR_SUCCESS) lost("publishing", rc);
    if (!connected_) lost("publishing", MOSQ_ERR_CONN_LOST);
    if (std::chrono::steady_clock::now() - last_progress > std::chrono::duration<double>(stall_s)) {
      disconnect();
      throw MqttError(MqttError::Kind::connection,
                      describe() + ": no acknowledgement for " + seconds(stall_s));
    }
  }
}

}  // namespace sluice::mqtt
