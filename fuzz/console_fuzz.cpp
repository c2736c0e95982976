// libFuzzer harness for the console's handling of client bytes (daemon/console_routes.hpp, console_handler.hpp):
// input = METHOD '\n' TARGET '\n' AUTHORIZATION '\n' HOST '\n' BODY. Any bytes get exactly one reply with a known status,
// synchronously (the stand-in dispatcher answers at once); no exception escapes; a frame route names a decimal id.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/console_handler.hpp"
#include "daemon/console_routes.hpp"

namespace {

std::string_view take_line(std::string_view& rest) {
  const auto nl = rest.find('\n');
  const std::string_view line = rest.substr(0, nl);
  rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  return line;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  sluice::HttpRequestView request;
  request.method = std::string(take_line(rest));
  request.target = std::string(take_line(rest));
  request.authorization = std::string(take_line(rest));
  request.host = std::string(take_line(rest));
  request.body = std::string(rest);
  request.remote = "127.0.0.1:1";

  const sluice::ConsoleRoute route = sluice::route_console(request.method, request.target);
  if (route.kind == sluice::ConsoleRouteKind::frame && request.target.find("/api/frame/") != 0) std::abort();
  if (auto token = sluice::bearer_token(request.authorization); token && token->size() >= request.authorization.size())
    std::abort();

  const sluice::ConsoleHandler handler(
      [](const sluice::ControlRequest& r, const sluice::PeerCredentials& p, sluice::ControlServer::Reply reply) {
        if (!p.tcp) std::abort();  // the console is always a TCP peer for the access policy
        reply({{"ok", r.kind != sluice::RequestKind::stop}, {"error", "permission denied: test"}});
      },
      nullptr);
  int replies = 0;
  unsigned status = 0;
  handler(request, [&](sluice::HttpReply r) {
    ++replies;
    status = r.status;
  });
  if (replies != 1) std::abort();
  switch (status) {
    case 200: case 400: case 403: case 404: case 405: case 409: case 421: break;
    default: std::abort();
  }
  return 0;
}
