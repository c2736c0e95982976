#pragma once
// The control socket: a UNIX stream socket carrying JSON lines (docs/protocol.md), and optionally a TCP
// listener. One session per client with an absolute deadline; limits on request size, and a client budget per
// peer class (admins, local readers, TCP peers), so peers of one class can never lock out another. Runs on the
// service's io_context.
#include "daemon/control_protocol.hpp"
#include "daemon/throttled_log.hpp"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <nlohmann/json.hpp>
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace sluice {

struct ControlLimits {
  std::size_t max_request_bytes = 64 * 1024;
  // Connections at once, per class (PeerClass): one class filling its budget never takes another's slots.
  std::size_t max_admin_clients = 32;
  std::size_t max_reader_clients = 32;
  std::size_t max_tcp_clients = 32;
  // A connection's life, counted from its connect: not restarted by a request, so a peer cannot hold a slot by
  // asking something now and then. A trace request adds its seconds (the reply comes after the recording), up
  // to `trace_allowance` in all per connection.
  std::chrono::milliseconds client_timeout{30'000};
  std::chrono::milliseconds trace_allowance{60'000};

  std::size_t max_clients(PeerClass c) const;
};

class ControlServer {
 public:
  // Sends the reply to one request; may be called later (e.g. after a trace was recorded). Only the first
  // call counts; it never throws (a reply that cannot be serialized becomes an error reply).
  using Reply = std::function<void(nlohmann::json reply)>;
  // Takes one checked request (control_protocol.hpp: lines that are not valid requests are answered with
  // an error before any handler runs) and replies through `reply`. Runs on the io_context thread; must not
  // block. An exception it throws becomes an error reply; the connection stays usable. The connection
  // reads its next request only after the reply.
  using Handler = std::function<void(const ControlRequest& request, const PeerCredentials& peer, Reply reply)>;

  // Decides a connection's class when it is accepted. Without one: UNIX peers are admins, TCP peers tcp.
  using Classify = std::function<PeerClass(const PeerCredentials& peer)>;

  // Binds `path` (mode 0660); a stale socket file is replaced, a live one (another daemon) is an error.
  ControlServer(boost::asio::io_context& io, std::string path, ControlLimits limits, Handler handler,
                Classify classify = {});
  ~ControlServer();
  // Also serves the protocol on TCP (off unless asked for; "127.0.0.1:PORT" keeps it on loopback). TCP
  // peers have no credentials (PeerCredentials::tcp): what they may do is the handler's access policy's
  // call. Returns the bound address.
  std::string listen_tcp(const std::string& address);
  void stop();  // closes the acceptors and every session; removes the socket file
  const std::string& path() const { return path_; }
  // Logs why a request of `peer` was refused: as it comes for UNIX peers, rate-limited for TCP peers (a
  // stranger can send refused requests as fast as it likes; the journal gets a count instead).
  void log_refusal(const PeerCredentials& peer, const std::string& line);
  // Connections of `c` open now.
  std::size_t clients(PeerClass c) const { return (*clients_)[static_cast<std::size_t>(c)]; }

 private:
  class Session;
  void accept();
  void accept_tcp();
  void retry_accept(boost::system::error_code ec, boost::asio::steady_timer& timer, std::function<void()> again);
  void start_session(boost::asio::generic::stream_protocol::socket socket, PeerCredentials peer);

  boost::asio::io_context& io_;
  std::string path_;
  ControlLimits limits_;
  Handler handler_;
  Classify classify_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  std::optional<boost::asio::ip::tcp::acceptor> tcp_acceptor_;
  boost::asio::steady_timer accept_retry_, tcp_accept_retry_;
  using ClassCounts = std::array<std::size_t, 3>;  // by PeerClass
  std::shared_ptr<ClassCounts> clients_ = std::make_shared<ClassCounts>();
  ThrottledLog tcp_log_;  // what TCP peers cause: refusals, lines that are not requests, connections over the limit
  std::vector<std::weak_ptr<Session>> sessions_;
  bool stopped_ = false;
};

}  // namespace sluice
