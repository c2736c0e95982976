// The control server stays available to admins whatever other peers do (issue 33): a client budget per peer
// class and an absolute connection deadline that a trace moves only within its allowance
// (daemon/control_server.hpp). The server runs in-process on its own io_context thread; the clients are plain
// sockets.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control_server.hpp"
#include "temp_dir.hpp"

using namespace sluice;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

// One connection to the control server; requests and replies as JSON lines, every wait bounded.
class Client {
 public:
  static Client unix_socket(const std::string& path) {
    Client c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    c.connected_ = ::connect(c.fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    return c;
  }
  static Client tcp(unsigned short port) {
    Client c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c.connected_ = ::connect(c.fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    return c;
  }
  Client(Client&& o) noexcept : fd_(std::exchange(o.fd_, -1)), connected_(o.connected_), in_(std::move(o.in_)) {}
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }

  bool send(const std::string& line) {
    const std::string out = line + "\n";
    return connected_ && ::send(fd_, out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size());
  }
  // The next reply line, or nullopt when the connection closed or nothing came within `wait`.
  std::optional<nlohmann::json> reply(std::chrono::milliseconds wait = 5s) {
    const auto until = std::chrono::steady_clock::now() + wait;
    while (in_.find('\n') == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return std::nullopt;
      in_.append(buf, static_cast<std::size_t>(n));
    }
    const auto nl = in_.find('\n');
    auto j = nlohmann::json::parse(in_.substr(0, nl), nullptr, false);
    in_.erase(0, nl + 1);
    if (j.is_discarded()) return std::nullopt;
    return j;
  }
  std::optional<nlohmann::json> ask(const std::string& line, std::chrono::milliseconds wait = 5s) {
    if (!send(line)) return std::nullopt;
    return reply(wait);
  }
  // True once the server closed the connection (within `wait`).
  bool closed_within(std::chrono::milliseconds wait) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
    char buf[256];
    return ::recv(fd_, buf, sizeof buf, 0) <= 0;
  }

 private:
  explicit Client(int fd) : fd_(fd) {}
  int fd_ = -1;
  bool connected_ = false;
  std::string in_;
};

// A control server on its own io_context thread. Every request is answered {"ok":true,"request":NAME}; a
// trace after its seconds (as the service does).
struct Server {
  test::TempDir dir{"sluice-availability"};
  asio::io_context io;
  std::optional<ControlServer> control;
  unsigned short tcp_port = 0;
  std::thread thread;

  explicit Server(ControlLimits limits) {
    control.emplace(io, (dir.path / "control.sock").string(), limits,
                    [this](const ControlRequest& r, const PeerCredentials&, ControlServer::Reply reply) {
                      const nlohmann::json answer = {{"ok", true}, {"request", std::string(request_name(r.kind))}};
                      if (r.kind != RequestKind::trace) return reply(answer);
                      auto timer = std::make_shared<asio::steady_timer>(
                          io, std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::duration<double>(*r.number(arg::seconds))));
                      timer->async_wait([timer, reply, answer](boost::system::error_code) { reply(answer); });
                    });
    const std::string bound = control->listen_tcp("127.0.0.1:0");
    tcp_port = static_cast<unsigned short>(std::stoi(bound.substr(bound.rfind(':') + 1)));
    thread = std::thread([this] { io.run(); });
  }
  ~Server() {
    asio::post(io, [this] { control->stop(); });
    io.stop();
    thread.join();
  }
  std::string socket_path() const { return (dir.path / "control.sock").string(); }
};

}  // namespace

TEST_CASE("control server: TCP peers that fill their budget never take an admin's slot", "[control][availability]") {
  ControlLimits limits;
  limits.max_tcp_clients = 3;
  limits.max_admin_clients = 2;
  Server server(limits);
  std::vector<Client> strangers;
  for (int i = 0; i < 3; ++i) {
    strangers.push_back(Client::tcp(server.tcp_port));
    REQUIRE(strangers.back().ask(R"({"request":"version"})"));  // each holds its slot, connected
  }
  Client over = Client::tcp(server.tcp_port);
  const auto refused = over.reply();
  REQUIRE(refused);
  CHECK((*refused)["ok"] == false);
  CHECK((*refused)["error"].get<std::string>().find("too many clients: tcp peers have 3 connections open") !=
        std::string::npos);
  CHECK(over.closed_within(2s));

  // The UNIX socket's admins have their own budget: both of theirs answer while the TCP peers hold all of theirs.
  Client admin1 = Client::unix_socket(server.socket_path());
  Client admin2 = Client::unix_socket(server.socket_path());
  const auto a1 = admin1.ask(R"({"request":"status"})");
  const auto a2 = admin2.ask(R"({"request":"stop"})");
  REQUIRE(a1);
  REQUIRE(a2);
  CHECK((*a1)["ok"] == true);
  CHECK((*a2)["request"] == "stop");
  Client admin3 = Client::unix_socket(server.socket_path());
  const auto a3 = admin3.reply();
  REQUIRE(a3);
  CHECK((*a3)["error"].get<std::string>().find("admins have 2 connections open") != std::string::npos);
}

TEST_CASE("control server: a client that hangs up gives its slot back at once", "[control][availability]") {
  ControlLimits limits;
  limits.max_tcp_clients = 1;
  Server server(limits);
  {
    Client first = Client::tcp(server.tcp_port);
    REQUIRE(first.ask(R"({"request":"version"})"));
  }  // closed long before its 30 s deadline
  bool admitted = false;
  for (int attempt = 0; attempt < 40 && !admitted; ++attempt) {  // the server sees the hang-up shortly
    Client next = Client::tcp(server.tcp_port);
    const auto r = next.ask(R"({"request":"version"})");
    admitted = r && (*r)["ok"] == true;
    if (!admitted) std::this_thread::sleep_for(50ms);
  }
  CHECK(admitted);
}

TEST_CASE("control server: the deadline counts from the connect, not from the last request", "[control][availability]") {
  ControlLimits limits;
  limits.client_timeout = 400ms;
  Server server(limits);
  Client chatty = Client::tcp(server.tcp_port);
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  // A request every 50 ms used to restart the timeout, keeping the slot for ever.
  while (std::chrono::steady_clock::now() - start < 5s) {
    if (!chatty.ask(R"({"request":"version"})", 1s)) {
      closed = true;
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  CHECK(closed);
}

TEST_CASE("control server: an admin that keeps asking keeps its connection (its own budget, its own deadline)",
          "[control][availability]") {
  ControlLimits limits;
  limits.client_timeout = 400ms;
  Server server(limits);
  Client monitor = Client::unix_socket(server.socket_path());
  const auto start = std::chrono::steady_clock::now();
  bool open = true;
  while (open && std::chrono::steady_clock::now() - start < 1600ms) {  // four times the client timeout
    open = monitor.ask(R"({"request":"status"})", 1s).has_value();
    std::this_thread::sleep_for(100ms);
  }
  CHECK(open);
  CHECK(monitor.closed_within(3s));  // and once it goes quiet, the deadline closes it
}

TEST_CASE("control server: a trace moves the deadline by its seconds, within the connection's allowance",
          "[control][availability]") {
  ControlLimits limits;
  limits.client_timeout = 300ms;
  limits.trace_allowance = 1000ms;
  Server server(limits);
  Client tracer = Client::tcp(server.tcp_port);
  // Longer than the client timeout: the reply still comes (the recording is not the peer's idleness).
  const auto first = tracer.ask(R"({"request":"trace","seconds":0.6})");
  REQUIRE(first);
  CHECK((*first)["ok"] == true);
  // 0.6 s of the 1 s allowance used: another 0.6 s is refused, saying why.
  const auto second = tracer.ask(R"({"request":"trace","seconds":0.6})");
  REQUIRE(second);
  CHECK((*second)["ok"] == false);
  CHECK((*second)["error"].get<std::string>().find("a connection may record 1 s in all") != std::string::npos);
  // And the connection still ends at its deadline.
  CHECK(tracer.closed_within(3s));
}
