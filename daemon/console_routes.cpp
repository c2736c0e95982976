#include "daemon/console_routes.hpp"

#include <array>
#include <charconv>

namespace sluice {

namespace {

constexpr std::array<std::string_view, 3> kAssets = {"index.html", "console.js", "console.css"};

bool is_read(std::string_view method) { return method == "GET" || method == "HEAD"; }

ConsoleRoute only(std::string_view allow, std::string_view method, ConsoleRoute route) {
  const bool ok = allow == "POST" ? method == "POST" : is_read(method);
  if (ok) return route;
  return {ConsoleRouteKind::method_not_allowed, {}, 0, std::string(allow)};
}

}  // namespace

ConsoleRoute route_console(std::string_view method, std::string_view target) {
  const auto query = target.find('?');
  const std::string_view path = query == std::string_view::npos ? target : target.substr(0, query);
  if (path.empty() || path.front() != '/') return {ConsoleRouteKind::bad_request};
  for (const unsigned char c : path)
    if (c < 0x21 || c > 0x7e || c == '%' || c == '\\' || c == '#') return {ConsoleRouteKind::bad_request};
  if (path.find("..") != std::string_view::npos || path.find("//") != std::string_view::npos)
    return {ConsoleRouteKind::bad_request};

  if (path == "/" || path == "/index.html") return only("GET, HEAD", method, {ConsoleRouteKind::asset, "index.html"});
  for (const std::string_view asset : kAssets)
    if (path.size() == asset.size() + 1 && path.substr(1) == asset)
      return only("GET, HEAD", method, {ConsoleRouteKind::asset, std::string(asset)});
  if (path == "/api/status") return only("GET, HEAD", method, {ConsoleRouteKind::status});
  if (path == "/api/control") return only("POST", method, {ConsoleRouteKind::control});

  constexpr std::string_view kFrame = "/api/frame/";
  if (path.substr(0, kFrame.size()) == kFrame) {
    const std::string_view id = path.substr(kFrame.size());
    if (id.empty() || id.size() > 10) return {ConsoleRouteKind::not_found};
    std::uint32_t value = 0;
    const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), value);
    if (ec != std::errc{} || end != id.data() + id.size()) return {ConsoleRouteKind::not_found};
    ConsoleRoute route{ConsoleRouteKind::frame};
    route.source_id = value;
    return only("GET, HEAD", method, std::move(route));
  }
  return {ConsoleRouteKind::not_found};
}

bool console_host_allowed(std::string_view host) {
  if (host.empty()) return true;
  std::string_view name = host;
  if (host.front() == '[') {  // [IPv6] or [IPv6]:PORT
    const auto close = host.find(']');
    if (close == std::string_view::npos || close < 2) return false;
    name = host.substr(1, close - 1);
    const std::string_view rest = host.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || rest.size() < 2 || rest.size() > 6 ||
                          rest.substr(1).find_first_not_of("0123456789") != std::string_view::npos))
      return false;
    return name.find_first_not_of("0123456789abcdefABCDEF:.") == std::string_view::npos;
  }
  if (const auto colon = host.rfind(':'); colon != std::string_view::npos) {
    const std::string_view port = host.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) return false;
    name = host.substr(0, colon);
  }
  if (name.size() == 9) {
    bool localhost = true;
    for (std::size_t i = 0; i < 9; ++i)
      localhost = localhost && (name[i] | 0x20) == "localhost"[i];
    if (localhost) return true;
  }
  // Dotted IPv4: four decimal parts of 1..3 digits, each at most 255.
  int parts = 0;
  std::size_t start = 0;
  while (start <= name.size()) {
    const auto dot = name.find('.', start);
    const std::string_view part = name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    unsigned value = 0;  // unsigned: from_chars takes no sign
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || part.size() > 3 || ec != std::errc{} || end != part.data() + part.size() || value > 255)
      return false;
    ++parts;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts == 4;
}

std::optional<std::string> bearer_token(std::string_view authorization) {
  if (authorization.empty()) return std::nullopt;
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() <= kScheme.size() || authorization.substr(0, kScheme.size()) != kScheme) return std::string();
  return std::string(authorization.substr(kScheme.size()));
}

}  // namespace sluice
