#include "daemon/control_server.hpp"

#include "daemon/listen_address.hpp"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace sluice {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using generic = asio::generic::stream_protocol;

std::size_t ControlLimits::max_clients(PeerClass c) const {
  switch (c) {
    case PeerClass::tcp:
      return max_tcp_clients;
    case PeerClass::reader:
      return max_reader_clients;
    case PeerClass::admin:
      return max_admin_clients;
  }
  return 0;
}

class ControlServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(generic::socket socket, ControlServer& server, PeerCredentials peer)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), server_(server), clients_(server.clients_),
        peer_(std::move(peer)), deadline_(std::chrono::steady_clock::now() + server.limits_.client_timeout) {
    ++count();
  }
  ~Session() { --count(); }

  void start() {
    spdlog::debug("control: client {} connected ({})", peer_.remote, peer_class_name(peer_.peer_class));
    arm_deadline();  // a refused client too: it has until then to read its one line
    const std::size_t limit = server_.limits_.max_clients(peer_.peer_class);
    if (count() > limit) {
      const std::string why = "too many clients: " + std::string(peer_class_name(peer_.peer_class)) + " have " +
                              std::to_string(limit) + " connections open, their limit" +
                              (peer_.peer_class == PeerClass::admin ? "" : " (admins have their own)");
      log(spdlog::level::warn, "control: " + peer_.remote + " refused: " + why);
      write_reply(error_reply(why), /*then_close=*/true);
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
  std::size_t& count() { return (*clients_)[static_cast<std::size_t>(peer_.peer_class)]; }

  void log(spdlog::level::level_enum level, const std::string& line) {
    if (peer_.tcp)
      server_.tcp_log_.log(line);
    else
      spdlog::log(level, "{}", line);
  }

  // One deadline for the whole connection, counted from its connect: reading, the handler's reply and writing
  // it all fall under it, and a request does not restart it (a peer cannot keep its slot by asking often). Only a
  // trace moves it (by its seconds). Admins are the exception: they have a budget of their own, so a monitor
  // that keeps one connection and asks every few seconds takes nothing from anyone; an admin's deadline
  // restarts with each reply it gets (renew_for_admin).
  void renew_for_admin() {
    if (peer_.peer_class != PeerClass::admin) return;
    deadline_ = std::chrono::steady_clock::now() + server_.limits_.client_timeout;
    arm_deadline();
  }

  void arm_deadline() {
    timer_.expires_at(deadline_);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return;  // cancelled: moved by a trace, or the session ended
      self->log(spdlog::level::info, "control: client " + self->peer_.remote + " reached its deadline; closed");
      self->close();
    });
  }

  void read() {
    asio::async_read_until(socket_, asio::dynamic_buffer(buffer_, server_.limits_.max_request_bytes + 1), '\n',
                           [self = shared_from_this()](boost::system::error_code ec, std::size_t n) { self->on_line(ec, n); });
  }

  // A trace's reply comes after its recording: the connection's deadline moves by the seconds asked for, within
  // the connection's trace allowance (what the wait for the reply did not use is given back by trace_answered).
  // Returns why not, or "".
  std::string grant_trace(double seconds) {
    const auto asked = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(seconds));
    const auto allowance = server_.limits_.trace_allowance;
    if (trace_granted_ + asked > allowance) {
      char text[160];
      std::snprintf(text, sizeof text, "trace refused: a connection may record %g s in all and this one has %g s left; connect again",
                    std::chrono::duration<double>(allowance).count(),
                    std::chrono::duration<double>(allowance - trace_granted_).count());
      return text;
    }
    trace_granted_ += asked;
    deadline_ += asked;
    trace_pending_ = Pending{std::chrono::steady_clock::now(), asked};
    arm_deadline();
    return {};
  }

  // The reply to a granted trace came: only the time it took counts (a trace refused at once costs nothing).
  void trace_answered() {
    if (!trace_pending_ || !socket_.is_open()) return;
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                             trace_pending_->since);
    const auto unused = trace_pending_->asked - std::min(took, trace_pending_->asked);
    trace_pending_.reset();
    trace_granted_ -= unused;
    deadline_ -= unused;
    arm_deadline();
  }

  void on_line(boost::system::error_code ec, std::size_t n) {
    if (ec == asio::error::not_found || (!ec && n > server_.limits_.max_request_bytes + 1)) {
      write_reply({{"ok", false},
                   {"error", "request larger than " + std::to_string(server_.limits_.max_request_bytes) + " bytes"}},
                  true);
      return;
    }
    if (ec) return close();  // closed by the peer, by the deadline, or by stop(): the timer lets go of the slot
    std::string line = buffer_.substr(0, n - 1);
    buffer_.erase(0, n);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      read();
      return;
    }
    ParsedLine parsed = parse_request_line(line);
    if (!parsed.request) {
      log(spdlog::level::info, "control: " + peer_.remote + " sent a request that is not valid: " + parsed.error);
      write_reply(error_reply(parsed.error), false);
      return;
    }
    if (parsed.request->kind == RequestKind::trace) {
      if (std::string why = grant_trace(*parsed.request->number(arg::seconds)); !why.empty()) {
        server_.log_refusal(peer_, "control: " + peer_.remote + ": " + why);
        write_reply(error_reply(why), false);
        return;
      }
    }
    // The reply may come later (trace); only its first call counts, and it never throws into the caller.
    auto replied = std::make_shared<bool>(false);
    Reply reply = [self = shared_from_this(), replied](nlohmann::json r) {
      if (*replied) return;
      *replied = true;
      self->trace_answered();
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
    if (!socket_.is_open()) return;  // the deadline closed it while the handler worked
    try {
      out_ = serialize_reply(reply);
    } catch (const std::exception& e) {  // out of memory, or a reply too deep to write
      out_ = serialize_reply(error_reply(std::string("cannot send the reply: ") + e.what()));
    }
    // A client that does not read its reply is dropped at the deadline too.
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this(), then_close](boost::system::error_code ec, std::size_t) {
                        if (ec || then_close) return self->close();
                        self->renew_for_admin();
                        self->read();
                      });
  }

  generic::socket socket_;
  asio::steady_timer timer_;
  ControlServer& server_;
  std::shared_ptr<ClassCounts> clients_;
  PeerCredentials peer_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds trace_granted_{0};
  struct Pending {
    std::chrono::steady_clock::time_point since;
    std::chrono::milliseconds asked;
  };
  std::optional<Pending> trace_pending_;  // a granted trace whose reply has not come yet
  std::string buffer_, out_;
};

ControlServer::ControlServer(asio::io_context& io, std::string path, ControlLimits limits, Handler handler,
                             Classify classify)
    : io_(io), path_(std::move(path)), limits_(limits), handler_(std::move(handler)), classify_(std::move(classify)),
      acceptor_(io), accept_retry_(io), tcp_accept_retry_(io), tcp_log_(io, "lines about TCP peers (refusals, requests that are not valid)", spdlog::level::warn) {
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
    if (ec) return retry_accept(ec, accept_retry_, [this] { accept(); });
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
    if (ec) return retry_accept(ec, tcp_accept_retry_, [this] { accept_tcp(); });
    PeerCredentials peer;
    boost::system::error_code rec;
    const auto remote = socket.remote_endpoint(rec);
    peer.tcp = true;
    peer.remote = rec ? std::string("tcp peer") : "tcp " + endpoint_string(remote);
    start_session(generic::socket(std::move(socket)), std::move(peer));
    accept_tcp();
  });
}

// An accept that failed for a reason other than stop() (out of file descriptors: the peers of some class hold
// them) is tried again shortly: giving up would lock every class out until a restart.
void ControlServer::retry_accept(boost::system::error_code ec, asio::steady_timer& timer, std::function<void()> again) {
  if (stopped_ || ec == asio::error::operation_aborted) return;
  spdlog::warn("control: accepting a connection failed: {}; trying again in 100 ms", ec.message());
  timer.expires_after(std::chrono::milliseconds(100));
  timer.async_wait([this, again = std::move(again)](boost::system::error_code wec) {
    if (!wec && !stopped_) again();
  });
}

void ControlServer::start_session(generic::socket socket, PeerCredentials peer) {
  if (classify_)
    peer.peer_class = classify_(peer);
  else
    peer.peer_class = peer.tcp ? PeerClass::tcp : PeerClass::admin;
  auto session = std::make_shared<Session>(std::move(socket), *this, std::move(peer));
  std::erase_if(sessions_, [](const auto& w) { return w.expired(); });
  sessions_.push_back(session);
  session->start();
}

void ControlServer::log_refusal(const PeerCredentials& peer, const std::string& line) {
  if (peer.tcp)
    tcp_log_.log(line);
  else
    spdlog::warn("{}", line);
}

void ControlServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  if (tcp_acceptor_) tcp_acceptor_->close(ec);
  accept_retry_.cancel();
  tcp_accept_retry_.cancel();
  for (auto& w : sessions_)
    if (auto s = w.lock()) s->close();
  std::error_code fec;
  std::filesystem::remove(path_, fec);
}

}  // namespace sluice
