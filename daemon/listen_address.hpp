#pragma once
// TCP listen addresses for the daemon's optional listeners (metrics, control over TCP):
// "HOST:PORT", "[IPV6]:PORT", or ":PORT" for every interface (IPv6 dual-stack where the host has it).
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice {

struct ListenSpec {
  std::string host;  // empty: all interfaces
  unsigned short port = 0;
};

// Throws std::runtime_error naming `what` and the address when it is malformed.
ListenSpec parse_listen(const std::string& listen, const std::string& what);
std::string endpoint_string(const boost::asio::ip::tcp::endpoint& ep);
// The endpoints to try for `spec`, best first (a host name is resolved; "all interfaces" is [::] then 0.0.0.0).
std::vector<boost::asio::ip::tcp::endpoint> listen_endpoints(boost::asio::io_context& io, const ListenSpec& spec,
                                                             const std::string& listen, const std::string& what);

// Opens, binds and listens `acceptor` on `listen`; returns the bound endpoint (port 0 picks one).
template <typename Acceptor>
boost::asio::ip::tcp::endpoint listen_tcp(boost::asio::io_context& io, Acceptor& acceptor, const std::string& listen,
                                          const std::string& what) {
  namespace net = boost::asio;
  const ListenSpec spec = parse_listen(listen, what);
  boost::system::error_code ec;
  net::ip::tcp::endpoint tried;
  for (const auto& ep : listen_endpoints(io, spec, listen, what)) {
    tried = ep;
    boost::system::error_code ignored;
    if (acceptor.is_open()) acceptor.close(ignored);
    acceptor.open(ep.protocol(), ec);
    if (ec) continue;
    acceptor.set_option(net::socket_base::reuse_address(true), ignored);
    if (spec.host.empty() && ep.address().is_v6()) acceptor.set_option(net::ip::v6_only(false), ignored);
    acceptor.bind(ep, ec);
    if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (!ec) return acceptor.local_endpoint();
  }
  throw std::runtime_error(what + ": cannot listen on '" + listen + "' (" + endpoint_string(tried) + "): " + ec.message());
}

}  // namespace sluice
