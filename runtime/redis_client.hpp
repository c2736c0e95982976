#pragma once
// A synchronous Redis connection (hiredis 0.14's socket layer, RESP2) for the connectors to Redis Streams.
//
// Every byte a server sends is hostile: replies are built by our own reader callbacks into an owned tree with
// bounds (kMaxReplyElements per array, kMaxReplyBytes buffered per reply, hiredis' nesting limit of 7), and
// every use of a reply checks its type. Errors are RedisError naming host:port, the stream (when there is one)
// and the command, never the password, and never raw non-UTF-8 bytes.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct redisContext;
struct ssl_st;

namespace sluice::redis {

inline constexpr std::size_t kMaxReplyElements = std::size_t{1} << 20;
inline constexpr std::size_t kMaxReplyBytes = std::size_t{256} << 20;

class RedisError : public std::runtime_error {
 public:
  enum class Kind {
    connection,  // cannot connect, connection lost, timeout: may pass, worth a reconnect
    server,      // the server answered with an error reply (-ERR, -WRONGTYPE, -NOAUTH ...)
    protocol,    // the reply broke RESP, a bound, or was not of the expected shape
  };
  RedisError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }
  bool transient() const { return kind_ == Kind::connection; }

 private:
  Kind kind_;
};

// One reply, owned. `str` holds a bulk string, a status line or an error line.
struct Reply {
  enum class Type { string, status, error, integer, nil, array };
  Type type = Type::nil;
  std::string str;
  long long integer = 0;
  std::vector<Reply> elements;

  bool is(Type t) const { return type == t; }
  // "bulk string", "array", ... for messages.
  static const char* type_name(Type t);
};

// Parses every complete reply in `bytes` (RESP2) with the same bounded reader the connection uses; stops at
// the first incomplete one. Throws RedisError(protocol) on malformed input. For tests and the fuzzer.
std::vector<Reply> parse_replies(std::string_view bytes);

// Where to connect. The password never appears in messages.
struct Endpoint {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string password;        // AUTH when not empty
  double connect_timeout_s = 5;
  double io_timeout_s = 10;    // a reply that takes longer loses the connection (a blocked XREADGROUP adds its block)
  // TLS (rediss://): the server's certificate is verified against `tls_ca_file` (else the system's CAs) and
  // must name `host` (a DNS name, or an IP address in its subjectAltName); a client certificate is sent when
  // both `tls_cert_file` and `tls_key_file` are given. A Client fills empty ones from SLUICE_REDIS_TLS_CA_FILE,
  // SLUICE_REDIS_TLS_CERT_FILE and SLUICE_REDIS_TLS_KEY_FILE (files, like the password, stay out of URIs).
  bool tls = false;
  std::string tls_ca_file, tls_cert_file, tls_key_file;
  std::string where() const;  // "host:port"
};

// redis://[:password@]host[:port]/STREAM[?key=value&...] (rediss:// for TLS) -> endpoint, stream and the query's
// pairs (in order, percent-decoded). No ACL user name (AUTH with a password only). Throws std::invalid_argument
// naming what is wrong (never echoing the password).
struct RedisUri {
  Endpoint endpoint;
  std::string stream;
  std::vector<std::pair<std::string, std::string>> query;
};
RedisUri parse_redis_uri(const std::string& uri);

// A stream entry as XRANGE/XREADGROUP/XAUTOCLAIM return it: ["id", [field, value, ...]].
struct StreamEntry {
  std::string id;
  std::vector<std::pair<std::string, std::string>> fields;
  const std::string* field(std::string_view name) const;
};
// The entries of an XRANGE reply (an array of entries) or an XAUTOCLAIM reply's second element. Entries a
// server deleted meanwhile come back as nil fields and are skipped. Throws RedisError(protocol) naming `what`.
std::vector<StreamEntry> parse_entries(const Reply& r, const std::string& what);
// XREADGROUP's reply: nil (timeout) or [[stream, [entries...]], ...]: the entries of every stream, in order.
std::vector<StreamEntry> parse_xreadgroup(const Reply& r, const std::string& what);
// "1700000000000-3": true when it has the shape ms-seq of decimal digits.
bool valid_entry_id(std::string_view id);

class Client {
 public:
  // `stream` names the stream this connection serves, for messages (may be empty).
  explicit Client(Endpoint endpoint, std::string stream = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Connects (and AUTHs) unless connected; RedisError(connection) when it cannot, RedisError(server) when AUTH
  // is refused.
  void connect();
  // connect(), retried with growing, jittered delays (0.1 s doubling to 2 s) while it fails transiently, until
  // `give_up` passes (then the last error is thrown) or `*stop` is set (then false is returned).
  bool connect_with_backoff(std::chrono::steady_clock::time_point give_up, const std::atomic<bool>* stop);
  bool connected() const { return ctx_ != nullptr; }
  void disconnect() noexcept;

  // One command (binary-safe arguments), its reply. An error reply is returned as a Reply of type error
  // (callers decide); a connection problem or a broken reply throws RedisError and disconnects.
  Reply command(const std::vector<std::string>& args);
  // Several commands sent at once, their replies in order (one round trip).
  std::vector<Reply> pipeline(const std::vector<std::vector<std::string>>& commands);
  // command() that throws RedisError(server) for an error reply.
  Reply checked(const std::vector<std::string>& args);

  const Endpoint& endpoint() const { return endpoint_; }
  // "redis 127.0.0.1:6379 stream 'jobs'" for messages.
  std::string describe() const;
  // Throws RedisError(protocol): `r` is not of type `want` in the reply to `command`.
  [[noreturn]] void wrong_type(const Reply& r, const char* want, std::string_view command) const;

 private:
  Reply read_reply(std::string_view command);
  [[noreturn]] void lost(std::string_view command, const std::string& why);
  // TLS: hiredis 0.14 has none, so hiredis keeps formatting commands and parsing replies while the bytes go
  // through OpenSSL on hiredis' socket.
  void start_tls();
  void send_tls(std::string_view command);
  void receive_tls(std::string_view command);
  Endpoint endpoint_;
  std::string stream_;
  redisContext* ctx_ = nullptr;
  ssl_st* ssl_ = nullptr;  // set while a TLS connection is up
};

// The command's name and its first argument for messages ("XADD 'results'"), bounded and UTF-8 safe.
std::string command_label(const std::vector<std::string>& args);

}  // namespace sluice::redis
