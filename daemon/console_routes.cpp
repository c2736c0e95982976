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

std::optional<std::string> bearer_token(std::string_view authorization) {
  if (authorization.empty()) return std::nullopt;
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() <= kScheme.size() || authorization.substr(0, kScheme.size()) != kScheme) return std::string();
  return std::string(authorization.substr(kScheme.size()));
}

}  // namespace sluice
