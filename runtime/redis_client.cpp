#include "runtime/redis_client.hpp"

#include <hiredis/hiredis.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "runtime/utf8.hpp"

namespace sluice::redis {
namespace {

// Text from a server or hiredis (which quotes the bytes it choked on) as a message may show it: UTF-8, bounded.
std::string shown(std::string_view s, std::size_t max = 200) {
  std::string out = to_valid_utf8(s.substr(0, max));
  for (char& c : out)
    if (c == '\r' || c == '\n') c = ' ';
  if (s.size() > max) out += "...";
  return out;
}

// --- the reader callbacks: replies into an owned tree, bounded ---------------------------------------------
// A child lives inside its parent's `elements` (sized once by createArray, so its address is stable); only
// the root is heap-allocated, and only the root is ever freed (hiredis frees r->reply, the root).
Reply* place(const redisReadTask* task) {
  if (task->parent) {
    auto* parent = static_cast<Reply*>(task->parent->obj);
    if (!parent || task->idx < 0 || static_cast<std::size_t>(task->idx) >= parent->elements.size()) return nullptr;
    return &parent->elements[static_cast<std::size_t>(task->idx)];
  }
  return new (std::nothrow) Reply;
}

void* create_string(const redisReadTask* task, char* str, size_t len) {
  Reply* r = place(task);
  if (!r) return nullptr;
  r->type = task->type == REDIS_REPLY_ERROR    ? Reply::Type::error
            : task->type == REDIS_REPLY_STATUS ? Reply::Type::status
                                               : Reply::Type::string;
  try {
    r->str.assign(str, len);
  } catch (...) {
    if (!task->parent) delete r;
    return nullptr;
  }
  return r;
}

void* create_array(const redisReadTask* task, int elements) {
  if (elements < 0 || static_cast<std::size_t>(elements) > kMaxReplyElements) return nullptr;
  Reply* r = place(task);
  if (!r) return nullptr;
  r->type = Reply::Type::array;
  try {
    r->elements.resize(static_cast<std::size_t>(elements));
  } catch (...) {
    if (!task->parent) delete r;
    return nullptr;
  }
  return r;
}

void* create_integer(const redisReadTask* task, long long value) {
  Reply* r = place(task);
  if (!r) return nullptr;
  r->type = Reply::Type::integer;
  r->integer = value;
  return r;
}

void* create_nil(const redisReadTask* task) {
  Reply* r = place(task);
  if (!r) return nullptr;
  r->type = Reply::Type::nil;
  return r;
}

void free_object(void* obj) { delete static_cast<Reply*>(obj); }

redisReplyObjectFunctions reply_functions = {create_string, create_array, create_integer, create_nil, free_object};

Reply take_root(void* raw) {
  std::unique_ptr<Reply> root(static_cast<Reply*>(raw));
  return std::move(*root);
}

timeval to_timeval(double seconds) {
  const double s = std::clamp(seconds, 0.001, 1e6);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(s);
  tv.tv_usec = static_cast<suseconds_t>((s - static_cast<double>(tv.tv_sec)) * 1e6);
  return tv;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s, const char* what) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int hi = i + 1 < s.size() ? hex_value(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) throw std::invalid_argument(std::string("a bad %-escape in the ") + what);
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace

const char* Reply::type_name(Type t) {
  switch (t) {
    case Type::string: return "bulk string";
    case Type::status: return "status";
    case Type::error: return "error";
    case Type::integer: return "integer";
    case Type::nil: return "nil";
    case Type::array: return "array";
  }
  return "?";
}

std::vector<Reply> parse_replies(std::string_view bytes) {
  std::unique_ptr<redisReader, void (*)(redisReader*)> reader(redisReaderCreateWithFunctions(&reply_functions),
                                                              redisReaderFree);
  if (!reader) throw RedisError(RedisError::Kind::protocol, "cannot create a reply reader");
  if (bytes.size() > kMaxReplyBytes) throw RedisError(RedisError::Kind::protocol, "replies over the size bound");
  std::vector<Reply> out;
  if (!bytes.empty() && redisReaderFeed(reader.get(), bytes.data(), bytes.size()) != REDIS_OK)
    throw RedisError(RedisError::Kind::protocol, "a reply reader refused the bytes");
  for (;;) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK)
      throw RedisError(RedisError::Kind::protocol, "a malformed reply: " + shown(reader->errstr));
    if (!raw) return out;
    out.push_back(take_root(raw));
  }
}

std::string Endpoint::where() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

RedisUri parse_redis_uri(const std::string& uri) {
  constexpr std::string_view scheme = "redis://", tls_scheme = "rediss://";
  RedisUri out;
  std::string_view rest;
  if (uri.compare(0, scheme.size(), scheme) == 0) {
    rest = std::string_view(uri).substr(scheme.size());
  } else if (uri.compare(0, tls_scheme.size(), tls_scheme) == 0) {
    rest = std::string_view(uri).substr(tls_scheme.size());
    out.endpoint.tls = true;
  } else {
    throw std::invalid_argument("not a redis:// (or rediss://) URI");
  }
  const std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos) throw std::invalid_argument("a redis:// URI needs a /STREAM after host:port");
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = rest.substr(slash + 1);
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view user_info = authority.substr(0, at);
    const std::size_t colon = user_info.find(':');
    if (colon != 0) throw std::invalid_argument("ACL user names are not supported: give only :PASSWORD@ before the host");
    out.endpoint.password = percent_decode(user_info.substr(1), "password");
    authority = authority.substr(at + 1);
  }
  std::string_view host = authority, port;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) throw std::invalid_argument("an unclosed [ in the host");
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') throw std::invalid_argument("junk after the ] of the host");
      port = after.substr(1);
    }
  } else if (const std::size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) throw std::invalid_argument("a redis:// URI needs a host");
  out.endpoint.host = std::string(host);
  if (!port.empty()) {
    int p = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535)
      throw std::invalid_argument("the port '" + shown(port, 20) + "' is not a number from 1 to 65535");
    out.endpoint.port = p;
  }
  std::string_view query;
  if (const std::size_t q = path.find('?'); q != std::string_view::npos) {
    query = path.substr(q + 1);
    path = path.substr(0, q);
  }
  out.stream = percent_decode(path, "stream name");
  if (out.stream.empty()) throw std::invalid_argument("a redis:// URI needs a /STREAM after host:port");
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const std::size_t eq = pair.find('=');
    std::string key = percent_decode(pair.substr(0, eq), "query");
    std::string value = eq == std::string_view::npos ? "" : percent_decode(pair.substr(eq + 1), "query");
    out.query.emplace_back(std::move(key), std::move(value));
  }
  return out;
}

const std::string* StreamEntry::field(std::string_view name) const {
  for (const auto& [k, v] : fields)
    if (k == name) return &v;
  return nullptr;
}

bool valid_entry_id(std::string_view id) {
  const std::size_t dash = id.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 >= id.size() || dash > 20 || id.size() - dash > 21)
    return false;
  auto digits = [](std::string_view s) { return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }); };
  return digits(id.substr(0, dash)) && digits(id.substr(dash + 1));
}

std::vector<StreamEntry> parse_entries(const Reply& r, const std::string& what) {
  auto bad = [&](const std::string& why) { return RedisError(RedisError::Kind::protocol, what + ": " + why); };
  if (!r.is(Reply::Type::array)) throw bad(std::string("entries are a ") + Reply::type_name(r.type) + ", not an array");
  std::vector<StreamEntry> out;
  out.reserve(r.elements.size());
  for (const Reply& e : r.elements) {
    if (e.is(Reply::Type::nil)) continue;
    if (!e.is(Reply::Type::array) || e.elements.size() != 2) throw bad("an entry is not [id, fields]");
    const Reply& id = e.elements[0];
    const Reply& fields = e.elements[1];
    if (!id.is(Reply::Type::string) || !valid_entry_id(id.str)) throw bad("an entry id is not of the form ms-seq");
    if (fields.is(Reply::Type::nil)) continue;  // deleted while pending (XAUTOCLAIM on redis 6)
    if (!fields.is(Reply::Type::array) || fields.elements.size() % 2 != 0)
      throw bad("entry " + id.str + ": its fields are not an array of name, value pairs");
    StreamEntry entry;
    entry.id = id.str;
    for (std::size_t i = 0; i < fields.elements.size(); i += 2) {
      const Reply& k = fields.elements[i];
      const Reply& v = fields.elements[i + 1];
      if (!k.is(Reply::Type::string) || !v.is(Reply::Type::string))
        throw bad("entry " + id.str + ": a field name or value is not a bulk string");
      entry.fields.emplace_back(k.str, v.str);
    }
    out.push_back(std::move(entry));
  }
  return out;
}

std::vector<StreamEntry> parse_xreadgroup(const Reply& r, const std::string& what) {
  if (r.is(Reply::Type::nil)) return {};
  if (!r.is(Reply::Type::array))
    throw RedisError(RedisError::Kind::protocol, what + ": the reply is a " + Reply::type_name(r.type) + ", not an array");
  std::vector<StreamEntry> out;
  for (const Reply& s : r.elements) {
    if (!s.is(Reply::Type::array) || s.elements.size() != 2 || !s.elements[0].is(Reply::Type::string))
      throw RedisError(RedisError::Kind::protocol, what + ": a stream's part is not [name, entries]");
    auto entries = parse_entries(s.elements[1], what);
    std::move(entries.begin(), entries.end(), std::back_inserter(out));
  }
  return out;
}

std::string command_label(const std::vector<std::string>& args) {
  if (args.empty()) return "(no command)";
  std::string out = shown(args[0], 32);
  if (args.size() > 1 && args[0] != "AUTH" && args[0] != "auth") out += " '" + shown(args[1], 80) + "'";
  return out;
}

// --- the connection ------------------------------------------------------------------------------------------

Client::Client(Endpoint endpoint, std::string stream) : endpoint_(std::move(endpoint)), stream_(std::move(stream)) {
  if (!endpoint_.tls) return;
  auto from_environment = [](std::string& file, const char* variable) {
    if (const char* value = std::getenv(variable); file.empty() && value) file = value;
  };
  from_environment(endpoint_.tls_ca_file, "SLUICE_REDIS_TLS_CA_FILE");
  from_environment(endpoint_.tls_cert_file, "SLUICE_REDIS_TLS_CERT_FILE");
  from_environment(endpoint_.tls_key_file, "SLUICE_REDIS_TLS_KEY_FILE");
}

Client::~Client() { disconnect(); }

void Client::disconnect() noexcept {
  if (ssl_) SSL_free(ssl_);  // no close_notify: the socket may be gone, and redisFree closes it
  ssl_ = nullptr;
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
}

std::string Client::describe() const {
  std::string out = (endpoint_.tls ? "redis (TLS) " : "redis ") + shown(endpoint_.where(), 300);
  if (!stream_.empty()) out += " stream '" + shown(stream_, 120) + "'";
  return out;
}

void Client::connect() {
  if (ctx_) return;
  redisContext* c = redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, to_timeval(endpoint_.connect_timeout_s));
  if (!c) throw RedisError(RedisError::Kind::connection, describe() + ": cannot connect: out of memory");
  if (c->err) {
    std::string why = shown(c->errstr);
    redisFree(c);
    throw RedisError(RedisError::Kind::connection, describe() + ": cannot connect: " + why);
  }
  if (redisSetTimeout(c, to_timeval(endpoint_.io_timeout_s)) != REDIS_OK || redisEnableKeepAlive(c) != REDIS_OK) {
    std::string why = shown(c->errstr);
    redisFree(c);
    throw RedisError(RedisError::Kind::connection, describe() + ": cannot set up the connection: " + why);
  }
  c->reader->fn = &reply_functions;
  ctx_ = c;
  if (endpoint_.tls) start_tls();
  if (!endpoint_.password.empty()) {
    Reply r = command({"AUTH", endpoint_.password});
    if (r.is(Reply::Type::error)) {
      disconnect();
      throw RedisError(RedisError::Kind::server, describe() + ": AUTH refused: " + shown(r.str));
    }
  }
}

bool Client::connect_with_backoff(std::chrono::steady_clock::time_point give_up, const std::atomic<bool>* stop) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  double delay = 0.1;
  for (;;) {
    try {
      connect();
      return true;
    } catch (const RedisError& e) {
      if (!e.transient() || std::chrono::steady_clock::now() >= give_up) throw;
    }
    const double jittered = delay * std::uniform_real_distribution<double>(0.5, 1.0)(rng);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(jittered);
    while (std::chrono::steady_clock::now() < until) {
      if (stop && stop->load()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    delay = std::min(delay * 2, 2.0);
  }
}

void Client::lost(std::string_view command, const std::string& why) {
  disconnect();
  throw RedisError(RedisError::Kind::connection, describe() + ": " + std::string(command) + ": " + why);
}

Reply Client::read_reply(std::string_view command) {
  void* raw = nullptr;
  auto fail = [&] {
    const bool broken = ctx_->err == REDIS_ERR_PROTOCOL || ctx_->err == REDIS_ERR_OOM;
    std::string why = ctx_->err == REDIS_ERR_OOM ? "a reply over the bounds (" + std::to_string(kMaxReplyElements) +
                                                       " elements an array)"
                                                 : shown(ctx_->errstr);
    if (ctx_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) why = "no reply within the I/O timeout";
    if (broken) {
      disconnect();
      throw RedisError(RedisError::Kind::protocol, describe() + ": " + std::string(command) + ": " + why);
    }
    lost(command, why);
  };
  if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) fail();
  while (!raw) {
    if (ctx_->reader->len - ctx_->reader->pos > kMaxReplyBytes) {
      disconnect();
      throw RedisError(RedisError::Kind::protocol, describe() + ": " + std::string(command) + ": a reply over " +
                                                       std::to_string(kMaxReplyBytes >> 20) + " MiB");
    }
    if (ssl_) receive_tls(command);
    else if (redisBufferRead(ctx_) != REDIS_OK) fail();
    if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) fail();
  }
  return take_root(raw);
}

std::vector<Reply> Client::pipeline(const std::vector<std::vector<std::string>>& commands) {
  const std::string label = commands.empty() ? "(nothing)" : command_label(commands.front());
  if (!ctx_) connect();
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& args : commands) {
    argv.clear();
    lens.clear();
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK)
      lost(label, "cannot queue the command: " + shown(ctx_->errstr));
  }
  if (ssl_) {
    send_tls(label);
  } else {
    int done = 0;
    while (!done)
      if (redisBufferWrite(ctx_, &done) != REDIS_OK) lost(label, "sending failed: " + shown(ctx_->errstr));
  }
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (const auto& args : commands) replies.push_back(read_reply(command_label(args)));
  return replies;
}

// --- TLS ---------------------------------------------------------------------------------------------------------
namespace {

struct FreeSslContext {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};

// The first error OpenSSL queued on this thread as text (the queue emptied), or `otherwise`.
std::string openssl_error(const std::string& otherwise) {
  const unsigned long first = ERR_get_error();
  ERR_clear_error();
  if (first == 0) return otherwise;
  char text[256];
  ERR_error_string_n(first, text, sizeof text);
  return shown(text);
}

// Why an SSL_read/SSL_write/SSL_connect returned `rc` (errno as it was right after the call).
std::string tls_failure(SSL* ssl, int rc, int saved_errno) {
  const int err = SSL_get_error(ssl, rc);
  if (err == SSL_ERROR_ZERO_RETURN) return "the server closed the connection";
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE || saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)
    return "no reply within the I/O timeout";
  if (err == SSL_ERROR_SYSCALL)
    return saved_errno != 0 ? shown(std::strerror(saved_errno)) : openssl_error("the server closed the connection");
  return openssl_error("TLS error " + std::to_string(err));
}

}  // namespace

void Client::start_tls() {
  auto fail = [&](RedisError::Kind kind, const std::string& why) {
    disconnect();
    throw RedisError(kind, describe() + ": TLS: " + why);
  };
  // A configuration that cannot work (files, certificates) is a protocol error: not retried by the sink.
  constexpr auto refused = RedisError::Kind::protocol;
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, FreeSslContext> tls(SSL_CTX_new(TLS_client_method()));
  if (!tls) fail(refused, openssl_error("cannot create a TLS context"));
  SSL_CTX_set_min_proto_version(tls.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(tls.get(), SSL_VERIFY_PEER, nullptr);
  const std::string& ca = endpoint_.tls_ca_file;
  if ((ca.empty() ? SSL_CTX_set_default_verify_paths(tls.get()) : SSL_CTX_load_verify_locations(tls.get(), ca.c_str(), nullptr)) != 1)
    fail(refused, (ca.empty() ? "cannot load the system's CA certificates: " : "cannot load the CA file '" + shown(ca) + "': ") +
                      openssl_error("no reason given"));
  const std::string &cert = endpoint_.tls_cert_file, &key = endpoint_.tls_key_file;
  if (cert.empty() != key.empty())
    fail(refused, "a client certificate needs both a certificate and a key file (SLUICE_REDIS_TLS_CERT_FILE, "
                  "SLUICE_REDIS_TLS_KEY_FILE)");
  if (!cert.empty()) {
    if (SSL_CTX_use_certificate_chain_file(tls.get(), cert.c_str()) != 1)
      fail(refused, "cannot load the client certificate '" + shown(cert) + "': " + openssl_error("no reason given"));
    if (SSL_CTX_use_PrivateKey_file(tls.get(), key.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(tls.get()) != 1)
      fail(refused, "cannot use the client key '" + shown(key) + "' (unreadable, or not the certificate's): " +
                        openssl_error("no reason given"));
  }
  ssl_ = SSL_new(tls.get());  // holds its own reference to the context
  if (!ssl_) fail(refused, openssl_error("cannot create a TLS connection"));
  // The certificate must name the host we asked for: an IP address in its subjectAltName, or the DNS name
  // (which is also sent, for servers behind a proxy that routes by name).
  X509_VERIFY_PARAM* verify = SSL_get0_param(ssl_);
  X509_VERIFY_PARAM_set_hostflags(verify, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (X509_VERIFY_PARAM_set1_ip_asc(verify, endpoint_.host.c_str()) != 1 &&
      (X509_VERIFY_PARAM_set1_host(verify, endpoint_.host.c_str(), 0) != 1 ||
       SSL_set_tlsext_host_name(ssl_, endpoint_.host.c_str()) != 1))
    fail(refused, "cannot check the certificate against the host name: " + openssl_error("no reason given"));
  if (SSL_set_fd(ssl_, ctx_->fd) != 1) fail(refused, openssl_error("cannot attach TLS to the socket"));
  errno = 0;
  const int rc = SSL_connect(ssl_);  // blocking, under the connection's I/O timeout
  const int saved_errno = errno;
  if (rc == 1) return;
  if (const long v = SSL_get_verify_result(ssl_); v != X509_V_OK)
    fail(refused, std::string("the server's certificate is not trusted: ") + X509_verify_cert_error_string(v));
  if (SSL_get_error(ssl_, rc) == SSL_ERROR_SSL)  // not TLS on the other end, no common protocol, refused
    fail(refused, "handshake failed: " + openssl_error("no reason given"));
  fail(RedisError::Kind::connection, "handshake failed: " + tls_failure(ssl_, rc, saved_errno));
}

void Client::send_tls(std::string_view command) {
  const std::size_t length = sdslen(ctx_->obuf);
  for (std::size_t sent = 0; sent < length;) {
    ERR_clear_error();
    errno = 0;
    const int n = SSL_write(ssl_, ctx_->obuf + sent, static_cast<int>(std::min<std::size_t>(length - sent, 1 << 30)));
    const int saved_errno = errno;
    if (n <= 0) lost(command, "sending failed: " + tls_failure(ssl_, n, saved_errno));
    sent += static_cast<std::size_t>(n);
  }
  sdssetlen(ctx_->obuf, 0);  // sds.h's inline half of sdsclear (hiredis 0.14 exports sdsclear without C linkage)
  ctx_->obuf[0] = '\0';
}

void Client::receive_tls(std::string_view command) {
  char buffer[16 * 1024];
  ERR_clear_error();
  errno = 0;
  const int n = SSL_read(ssl_, buffer, sizeof buffer);
  const int saved_errno = errno;
  if (n <= 0) lost(command, tls_failure(ssl_, n, saved_errno));
  if (redisReaderFeed(ctx_->reader, buffer, static_cast<std::size_t>(n)) != REDIS_OK) {
    disconnect();
    throw RedisError(RedisError::Kind::protocol, describe() + ": " + std::string(command) + ": the reply broke RESP");
  }
}

Reply Client::command(const std::vector<std::string>& args) { return std::move(pipeline({args}).front()); }

Reply Client::checked(const std::vector<std::string>& args) {
  Reply r = command(args);
  if (r.is(Reply::Type::error))
    throw RedisError(RedisError::Kind::server, describe() + ": " + command_label(args) + ": " + shown(r.str));
  return r;
}

void Client::wrong_type(const Reply& r, const char* want, std::string_view command) const {
  throw RedisError(RedisError::Kind::protocol, describe() + ": " + std::string(command) + ": the reply is a " +
                                                   Reply::type_name(r.type) + ", not " + want);
}

}  // namespace sluice::redis
