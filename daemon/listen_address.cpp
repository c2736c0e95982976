#include "daemon/listen_address.hpp"

#include <boost/asio/io_context.hpp>

namespace sluice {

namespace net = boost::asio;
using tcp = net::ip::tcp;

std::string endpoint_string(const tcp::endpoint& ep) {
  const auto a = ep.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(ep.port());
}

ListenSpec parse_listen(const std::string& listen, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return std::runtime_error(what + ": invalid listen address '" + listen + "': " + why +
                              " (expected HOST:PORT, [IPV6]:PORT or :PORT)");
  };
  ListenSpec spec;
  std::string port;
  if (!listen.empty() && listen.front() == '[') {
    const auto close = listen.find(']');
    if (close == std::string::npos) throw bad("missing ']'");
    if (close + 1 >= listen.size() || listen[close + 1] != ':') throw bad("missing ':PORT' after ']'");
    spec.host = listen.substr(1, close - 1);
    if (spec.host.empty()) throw bad("empty IPv6 address");
    boost::system::error_code ec;
    (void)net::ip::make_address_v6(spec.host, ec);
    if (ec) throw bad("'" + spec.host + "' is not an IPv6 address");
    port = listen.substr(close + 2);
  } else {
    const auto colon = listen.rfind(':');
    if (colon == std::string::npos) throw bad("missing ':PORT'");
    spec.host = listen.substr(0, colon);
    if (spec.host.find(':') != std::string::npos) throw bad("write an IPv6 address in brackets");
    port = listen.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    throw bad("port must be a number 0..65535");
  const unsigned long p = std::stoul(port);
  if (p > 65535) throw bad("port must be a number 0..65535");
  spec.port = static_cast<unsigned short>(p);
  return spec;
}

std::vector<tcp::endpoint> listen_endpoints(net::io_context& io, const ListenSpec& spec, const std::string& listen,
                                            const std::string& what) {
  if (spec.host.empty())
    return {tcp::endpoint(net::ip::address_v6::any(), spec.port), tcp::endpoint(net::ip::address_v4::any(), spec.port)};
  boost::system::error_code ec;
  const auto addr = net::ip::make_address(spec.host, ec);
  if (!ec) return {tcp::endpoint(addr, spec.port)};
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(spec.host, std::to_string(spec.port), ec);
  if (ec || results.empty())
    throw std::runtime_error(what + ": cannot listen on '" + listen + "': cannot resolve '" + spec.host +
                             "': " + (ec ? ec.message() : std::string("no addresses")));
  return {results.begin()->endpoint()};
}

}  // namespace sluice
