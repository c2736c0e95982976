#include "daemon/control_server.hpp"

#include "daemon/listen_address.hpp"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <filesystem>

namespace sluice {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using generic = asio::generic::stream_protocol;

class ControlServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(generic::socket socket, ControlServer& server, PeerCredentials peer)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), server_(server), clients_(server.clients_),
        peer_(std::move(peer)) {
    ++*clients_;
  }
  ~Session() { --*clients_; }

  void start(bool over_limit) {
    spdlog::debug("control: client {} connected", peer_.remote);
    if (over_limit) {
      write_reply({{"ok", false}, {"error", "too many clients (limit " + std::to_string(server_.limits_.max_clients) + ")"}},
                  /*then_close=*/true);
      return;
    }
    read();
  }

  void close() {
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
  }

 private:
  void arm_deadline() {
    timer_.expires_after(server_.limits_.client_timeout);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return;  // cancelled: a request arrived or the session ended
      spdlog::info("control: client {} timed out", self->peer_.remote);
      self->close();
    });
  }

  void read() {
    arm_deadline();
    asio::async_read_until(socket_, asio::dynamic_buffer(buffer_, server_.limits_.max_request_bytes + 1), '\n',
                           [self = shared_from_this()](boost::system::error_code ec, std::size_t n) { self->on_line(ec, n); });
  }

  void on_line(boost::system::error_code ec, std::size_t n) {
    timer_.cancel();
    if (ec == asio::error::not_found || (!ec && n > server_.limits_.max_request_bytes + 1)) {
      write_reply({{"ok", false},
                   {"error", "request larger than " + std::to_string(server_.limits_.max_request_bytes) + " bytes"}},
                  true);
      return;
    }
    if (ec) return;  // closed by the peer, or by stop()
    std::string line = buffer_.substr(0, n - 1);
    buffer_.erase(0, n);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      read();
      return;
    }
    ParsedLine parsed = parse_request_line(line);
    if (!parsed.request) {
      spdlog::info("control: {} sent a request that is not valid: {}", peer_.remote, parsed.error);
      write_reply(error_reply(parsed.error), false);
      return;
    }
    // The reply may come later (trace); only its first call counts, and it never throws into the caller.
    auto replied = std::make_shared<bool>(false);
    Reply reply = [self = shared_from_this(), replied](nlohmann::json r) {
      if (*replied) return;
      *replied = true;
      self->write_reply(r, false);
    };
    try {
      server_.handler_(*parsed.request, peer_, reply);
    } catch (const std::exception& e) {
      spdlog::error("control: {} from {} failed: {}", request_name(parsed.request->kind), peer_.remote, e.what());
      reply(error_reply(std::string(request_name(parsed.request->kind)) + " failed: " + safe_message(e.what())));
    } catch (...) {
      spdlog::error("control: {} from {} failed with an unknown exception", request_name(parsed.request->kind),
                    peer_.remote);
      reply(error_reply(std::string(request_name(parsed.request->kind)) + " failed"));
    }
  }

  void write_reply(const nlohmann::json& reply, bool then_close) {
    try {
      out_ = serialize_reply(reply);
    } catch (const std::exception& e) {  // out of memory, or a reply too deep to write
      out_ = serialize_reply(error_reply(std::string("cannot send the reply: ") + e.what()));
    }
    arm_deadline();  // a client that does not read its reply is dropped too
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this(), then_close](boost::system::error_code ec, std::size_t) {
                        self->timer_.cancel();
                        if (ec || then_close) return self->close();
                        self->read();
                      });
  }

  generic::socket socket_;
  asio::steady_timer timer_;
  ControlServer& server_;
  std::shared_ptr<std::size_t> clients_;
  PeerCredentials peer_;
  std::string buffer_, out_;
};

ControlServer::ControlServer(asio::io_context& io, std::string path, ControlLimits limits, Handler handler)
    : io_(io), path_(std::move(path)), limits_(limits), handler_(std::move(handler)), acceptor_(io) {
  namespace fs = std::filesystem;
  std::error_code fec;
  if (fs::is_socket(path_, fec)) {
    local::socket probe(io);
    boost::system::error_code ec;
    probe.connect(local::endpoint(path_), ec);
    if (!ec) throw std::runtime_error("control socket " + path_ + " is in use (is another sluiced running?)");
    fs::remove(path_, fec);  // stale: left by a daemon that died
  } else if (fs::exists(path_, fec)) {
    throw std::runtime_error("control socket path " + path_ + " exists and is not a socket");
  }
  boost::system::error_code ec;
  acceptor_.open(local(), ec);
  if (!ec) acceptor_.bind(local::endpoint(path_), ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("cannot listen on control socket " + path_ + ": " + ec.message());
  ::chmod(path_.c_str(), 0660);  // the socket's group decides who may connect
  accept();
}

ControlServer::~ControlServer() { stop(); }

void ControlServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, local::socket socket) {
    if (ec) return;  // acceptor closed
    PeerCredentials peer;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
      peer = {true, false, cred.pid, cred.uid, cred.gid,
              "pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid) + " gid " + std::to_string(cred.gid)};
    start_session(generic::socket(std::move(socket)), std::move(peer));
    accept();
  });
}

std::string ControlServer::listen_tcp(const std::string& address) {
  tcp_acceptor_.emplace(io_);
  const auto bound = sluice::listen_tcp(io_, *tcp_acceptor_, address, "control");
  accept_tcp();
  return endpoint_string(bound);
}

void ControlServer::accept_tcp() {
  tcp_acceptor_->async_accept([this](boost::system::error_code ec, asio::ip::tcp::socket socket) {
    if (ec) return;
    PeerCredentials peer;
    boost::system::error_code rec;
    const auto remote = socket.remote_endpoint(rec);
    peer.tcp = true;
    peer.remote = rec ? std::string("tcp peer") : "tcp " + endpoint_string(remote);
    start_session(generic::socket(std::move(socket)), std::move(peer));
    accept_tcp();
  });
}

void ControlServer::start_session(generic::socket socket, PeerCredentials peer) {
  auto session = std::make_shared<Session>(std::move(socket), *this, std::move(peer));
  std::erase_if(sessions_, [](const auto& w) { return w.expired(); });
  sessions_.push_back(session);
  session->start(*clients_ > limits_.max_clients);
}

void ControlServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  if (tcp_acceptor_) tcp_acceptor_->close(ec);
  for (auto& w : sessions_)
    if (auto s = w.lock()) s->close();
  std::error_code fec;
  std::filesystem::remove(path_, fec);
}

}  // namespace sluice
