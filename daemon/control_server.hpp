#pragma once
// The control socket: a UNIX stream socket carrying JSON lines (docs/protocol.md). One session per
// client, each with a deadline; limits on request size and client count. Runs on the service's io_context.
#include "daemon/control_protocol.hpp"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <nlohmann/json.hpp>
#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace sluice {

struct ControlLimits {
  std::size_t max_request_bytes = 64 * 1024;
  std::size_t max_clients = 32;
  std::chrono::milliseconds client_timeout{30'000};  // without a complete request
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

  // Binds `path` (mode 0660); a stale socket file is replaced, a live one (another daemon) is an error.
  ControlServer(boost::asio::io_context& io, std::string path, ControlLimits limits, Handler handler);
  ~ControlServer();
  // Also serves the protocol on TCP (off unless asked for; "127.0.0.1:PORT" keeps it on loopback). TCP
  // peers have no credentials (PeerCredentials::tcp): what they may do is the handler's access policy's
  // call. Returns the bound address.
  std::string listen_tcp(const std::string& address);
  void stop();  // closes the acceptors and every session; removes the socket file
  const std::string& path() const { return path_; }

 private:
  class Session;
  void accept();
  void accept_tcp();
  void start_session(boost::asio::generic::stream_protocol::socket socket, PeerCredentials peer);

  boost::asio::io_context& io_;
  std::string path_;
  ControlLimits limits_;
  Handler handler_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  std::optional<boost::asio::ip::tcp::acceptor> tcp_acceptor_;
  std::shared_ptr<std::size_t> clients_ = std::make_shared<std::size_t>(0);
  std::vector<std::weak_ptr<Session>> sessions_;
  bool stopped_ = false;
};

}  // namespace sluice
