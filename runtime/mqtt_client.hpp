#pragma once
// A publishing MQTT 3.1.1 connection (libmosquitto, driven from the caller's thread with mosquitto_loop: no
// thread of its own) for the mqtt sink.
//
// What counts as sent is ours, not the library's: publish() is handed a batch and a done-flag per message, and
// sets a flag only when the broker acknowledged that message (QoS 1: its PUBACK; QoS 0: it was written to the
// socket, which is all QoS 0 ever says). When the connection is lost, the library's state goes with it (each
// connect() starts a fresh client and a clean session), and the caller publishes what is not done again on the
// next connection: a message whose PUBACK was lost arrives twice, never zero times (QoS 1 is at-least-once).
//
// Errors are MqttError naming the broker's host:port and the client id, never the password or bytes the broker
// sent.
#include <chrono>
#include <cstddef>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

struct mosquitto;

namespace sluice::mqtt {

class MqttError : public std::runtime_error {
 public:
  enum class Kind {
    connection,  // cannot connect, connection lost, no acknowledgement in time: may pass, worth a reconnect
    refused,     // the broker refused us (CONNACK: bad user name or password, not authorised, client id rejected)
    message,     // the library refused a message (too large, a topic it will not take)
  };
  MqttError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }
  bool transient() const { return kind_ == Kind::connection; }

 private:
  Kind kind_;
};

struct ClientOptions {
  std::string host;
  int port = 1883;
  std::string client_id;  // empty: "sluice-" and 16 random hex digits
  int keepalive_s = 30;
  std::string username, password;  // empty: none
  double connect_timeout_s = 10;   // for the TCP connect and the broker's CONNACK
};

struct Message {
  std::string topic, payload;
};

class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // A fresh connection (and clean session) to the broker; drops the one there was. Returns once the broker
  // accepted it (CONNACK 0); throws MqttError otherwise.
  void connect();
  bool connected() const { return mosq_ != nullptr && connected_; }
  // Sends DISCONNECT (best effort) and drops the client with whatever it had not sent.
  void disconnect() noexcept;

  // Publishes messages[i] for each i with done[i] == 0 in order, at most `window` unacknowledged at once, each
  // with `qos` (0 or 1) and retain off; returns once every one is done (see above). Throws MqttError when the
  // connection is lost or no acknowledgement came for `stall_s` seconds (the connection is then dropped), or
  // when the library refuses a message; the done flags say what got through before.
  void publish(const std::vector<Message>& messages, std::vector<char>& done, int qos, std::size_t window,
               double stall_s);

  // "MQTT broker 127.0.0.1:1883 (client id sluice-...)".
  std::string describe() const;
  const std::string& client_id() const { return options_.client_id; }

 private:
  static void on_connect(struct mosquitto*, void* self, int rc);
  static void on_disconnect(struct mosquitto*, void* self, int rc);
  static void on_publish(struct mosquitto*, void* self, int mid);
  [[noreturn]] void lost(const std::string& what, int rc);
  void quick_ack() noexcept;

  ClientOptions options_;
  struct mosquitto* mosq_ = nullptr;
  bool connected_ = false;
  int connack_ = -1;           // the CONNACK's return code; -1 until it came
  std::set<int> acknowledged_; // message ids the library reported sent (QoS 0) or acknowledged (QoS 1)
};

}  // namespace sluice::mqtt
