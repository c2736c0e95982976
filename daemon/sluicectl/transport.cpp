#include "daemon/sluicectl/transport.hpp"

#include "runtime/printable.hpp"

#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "daemon/protocol.hpp"
#include "daemon/sluicectl/cli.hpp"
#include "daemon/sluicectl/interrupt.hpp"

namespace sluice::ctl {
namespace {

using json = nlohmann::ordered_json;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

std::string connect_hint(int err, const std::string& path) {
  if (err == ECONNREFUSED || err == ENOTSOCK) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode))
      return std::string("not a socket (") +
             (S_ISDIR(st.st_mode)   ? "a directory"
              : S_ISREG(st.st_mode) ? "a regular file"
                                    : "another kind of file") +
             ") — is this the control socket?";
  }
  switch (err) {
    case ENOENT:
      return "no such file — is sluiced running? (--socket PATH or $SLUICE_SOCKET to choose another socket)";
    case EACCES:
    case EPERM: {
      std::string hint = "permission denied — are you in the socket's group";
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0) {
        if (const struct group* gr = ::getgrgid(st.st_gid)) hint += std::string(" ('") + gr->gr_name + "')";
      }
      return hint + "?";
    }
    case ECONNREFUSED:
      return "connection refused — nothing is listening (stale socket file? is sluiced running?)";
    case ENOTSOCK:
      return "not a socket — is this the control socket?";
    case ENOTDIR:
      return "a component of the path is not a directory";
    case ELOOP:
      return "too many symbolic links";
    default:
      return std::strerror(err);
  }
}

// "HOST:PORT" or "[V6]:PORT" -> a connected-or-connecting non-blocking TCP socket; -1 with `error` set.
int tcp_socket(const std::string& address, sockaddr_storage& addr, socklen_t& len, std::string& error) {
  std::string host, port;
  if (!address.empty() && address[0] == '[') {
    const auto close = address.find("]:");
    if (close == std::string::npos) return error = "--tcp: expected [IPV6]:PORT, got '" + address + "'", -1;
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0) return error = "--tcp: expected HOST:PORT, got '" + address + "'", -1;
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0 || !found)
    return error = "--tcp " + address + ": " + (rc != 0 ? gai_strerror(rc) : "no address"), -1;
  std::memcpy(&addr, found->ai_addr, found->ai_addrlen);
  len = found->ai_addrlen;
  const int family = found->ai_family;
  ::freeaddrinfo(found);
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) error = std::string("cannot create a socket: ") + std::strerror(errno);
  return fd;
}

}  // namespace

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
}

Outcome exchange(const Connection& o, const nlohmann::json& request_in, double timeout_s, std::size_t max_reply) {
  const std::string& path = o.address();
  nlohmann::json request = request_in;
  if (!o.token.empty()) request[std::string(arg::token.key)] = o.token;
  Outcome out;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  auto fail = [&](int code, std::string msg) {
    out.code = code;
    out.error = std::move(msg);
    return out;
  };
  auto interrupted = [&]() {
    out.interrupted = true;
    out.code = kExitOk;
    return out;
  };

  std::string line;
  try {
    line = request.dump() + "\n";
  } catch (const json::exception& e) {
    return fail(kExitUsage, std::string("cannot encode the request: ") + e.what());
  }

  sockaddr_storage storage{};
  socklen_t addr_len = 0;
  int raw_fd = -1;
  if (!o.tcp.empty()) {
    std::string error;
    raw_fd = tcp_socket(o.tcp, storage, addr_len, error);
    if (raw_fd < 0) return fail(kExitConnect, error);
  } else {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty()) return fail(kExitUsage, "empty socket path");
    if (path.size() >= sizeof addr.sun_path)
      return fail(kExitUsage, "socket path too long (" + std::to_string(path.size()) + " bytes, at most " +
                                  std::to_string(sizeof addr.sun_path - 1) + "): " + path);
    std::memcpy(addr.sun_path, path.data(), path.size());
    std::memcpy(&storage, &addr, sizeof addr);
    addr_len = sizeof addr;
    raw_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  }
  Fd fd(raw_fd);
  if (fd.get() < 0) return fail(kExitConnect, std::string("cannot create a socket: ") + std::strerror(errno));

  // Connect. A UNIX socket connects at once or fails; EAGAIN means the listener's backlog is full,
  // so retry until the deadline.
  for (;;) {
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&storage), addr_len) == 0) break;
    const int err = errno;
    if (err == EINTR) {
      if (g_interrupted) return interrupted();
      continue;
    }
    if (err == EINPROGRESS) {  // not expected for AF_UNIX, but handle it like TCP
      pollfd p{fd.get(), POLLOUT, 0};
      int r = ::poll(&p, 1, ms_left(deadline));
      if (r < 0 && errno == EINTR) {
        if (g_interrupted) return interrupted();
        continue;
      }
      if (r == 0)
        return fail(kExitTimeout, "cannot connect to " + path + ": no answer within " + format_seconds(timeout_s));
      int so = 0;
      socklen_t len = sizeof so;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so, &len);
      if (so == 0) break;
      return fail(kExitConnect, "cannot connect to " + path + ": " + connect_hint(so, path));
    }
    if (err == EAGAIN) {
      if (ms_left(deadline) == 0)
        return fail(kExitTimeout, "cannot connect to " + path +
                                      ": the daemon is not accepting connections (backlog full for " +
                                      format_seconds(timeout_s) + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (g_interrupted) return interrupted();
      continue;
    }
    return fail(kExitConnect, "cannot connect to " + path + ": " + connect_hint(err, path));
  }

  // Send the request line.
  std::size_t sent = 0;
  while (sent < line.size()) {
    ssize_t n = ::send(fd.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) {
      if (g_interrupted) return interrupted();
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd.get(), POLLOUT, 0};
      int r = ::poll(&p, 1, ms_left(deadline));
      if (r < 0 && errno == EINTR) {
        if (g_interrupted) return interrupted();
        continue;
      }
      if (r == 0) return fail(kExitTimeout, "timed out sending the request to " + path);
      continue;
    }
    return fail(kExitTimeout, "the daemon closed the connection while the request was sent (" +
                                  std::string(std::strerror(errno)) + ")");
  }

  // Read one reply line.
  std::string buf;
  std::size_t nl = std::string::npos;
  bool eof = false;
  while (nl == std::string::npos && !eof) {
    pollfd p{fd.get(), POLLIN, 0};
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r < 0) {
      if (errno == EINTR) {
        if (g_interrupted) return interrupted();
        continue;
      }
      return fail(kExitTimeout, std::string("poll: ") + std::strerror(errno));
    }
    if (r == 0)
      return fail(kExitTimeout, "no reply from " + path + " within " + format_seconds(timeout_s) +
                                    " (is the daemon stuck? --timeout to wait longer)");
    char chunk[65536];
    ssize_t n = ::recv(fd.get(), chunk, sizeof chunk, 0);
    if (n < 0) {
      if (errno == EINTR) {
        if (g_interrupted) return interrupted();
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == ECONNRESET) {
        eof = true;
        break;
      }
      return fail(kExitTimeout, std::string("reading the reply: ") + std::strerror(errno));
    }
    if (n == 0) {
      eof = true;
      break;
    }
    const std::size_t old = buf.size();
    buf.append(chunk, static_cast<std::size_t>(n));
    nl = buf.find('\n', old);
    if (nl == std::string::npos && buf.size() > max_reply)
      return fail(kExitTimeout, "broken reply from " + path + ": more than " + std::to_string(max_reply >> 20) +
                                    " MiB without a newline");
  }
  if (nl != std::string::npos) buf.resize(nl);
  if (buf.find_first_not_of(" \t\r") == std::string::npos)
    return fail(kExitTimeout, "the daemon closed the connection without replying");

  json reply = json::parse(buf, nullptr, /*allow_exceptions=*/false);
  auto excerpt = [&]() {
    std::string s = buf.size() > 200 ? buf.substr(0, 200) + "..." : buf;
    return s;
  };
  if (reply.is_discarded()) return fail(kExitTimeout, "broken reply from " + path + " (not JSON): " + excerpt());
  if (!reply.is_object()) return fail(kExitTimeout, "broken reply from " + path + " (not an object): " + excerpt());
  auto ok = reply.find("ok");
  if (ok == reply.end() || !ok->is_boolean())
    return fail(kExitTimeout, "broken reply from " + path + " (no boolean 'ok'): " + excerpt());
  const bool accepted = ok->get<bool>();
  out.reply = std::move(reply);
  if (!accepted) {
    out.code = kExitRefused;
    auto e = out.reply.find("error");
    if (e != out.reply.end() && e->is_string())
      out.error = e->get<std::string>();
    else if (e != out.reply.end())
      out.error = e->dump();
    else
      out.error = "request refused (the daemon gave no reason)";
  }
  return out;
}

int report_failure(const Outcome& o) {
  // The daemon's reason (or a reply quoted in a message) is text from outside: escaped, one line.
  if (o.code == kExitRefused)
    std::fprintf(stderr, "sluicectl: daemon: %s\n", printable(o.error).c_str());
  else if (o.code != kExitOk)
    std::fprintf(stderr, "sluicectl: %s\n", printable(o.error).c_str());
  return o.code;
}

bool read_token_file(const std::string& path, std::string& token, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return error = "--token-file " + path + ": " + std::strerror(errno), false;
  Fd guard(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return error = "--token-file " + path + ": not a regular file", false;
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return error = "--token-file " + path + " has mode " + mode + ": others may read it (chmod 600 " + path + ")", false;
  }
  char buf[4097];
  ssize_t n = ::read(fd, buf, sizeof buf);
  if (n < 0) return error = "--token-file " + path + ": " + std::strerror(errno), false;
  if (n > 4096) return error = "--token-file " + path + ": larger than 4096 bytes", false;
  token.assign(buf, static_cast<std::size_t>(n));
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) return error = "--token-file " + path + " is empty", false;
  return true;
}

}  // namespace sluice::ctl
