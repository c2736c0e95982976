#pragma once
// What a console request asks for (docs/console.md), decided from its method and target alone: a pure function
// of client bytes, so the Catch2 tests and fuzz/console_route_fuzz.cpp drive it without a socket.
//
//   GET|HEAD /, /index.html, /console.js, /console.css   the page (built into the binary, daemon/console/)
//   GET|HEAD /api/status                                 the control protocol's `status` reply (JSON)
//   GET|HEAD /api/frame/ID                               source ID's last frame as a JPEG (ID: decimal, < 2^32)
//   POST     /api/control                                one control request line (docs/protocol.md) as the body
// A query string (?t=...) is ignored. Anything else: 404; a known path with another method: 405 naming the allowed
// ones; a target that is not an origin-form path (no leading '/', control bytes, '..' or '%'): 400.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

enum class ConsoleRouteKind { asset, status, frame, control, bad_request, not_found, method_not_allowed };

struct ConsoleRoute {
  ConsoleRouteKind kind = ConsoleRouteKind::not_found;
  std::string asset;           // asset: the file name under daemon/console/
  std::uint32_t source_id = 0; // frame
  std::string allow;           // method_not_allowed: the Allow header
};

ConsoleRoute route_console(std::string_view method, std::string_view target);

// Whether a request's Host header names this machine by address: an IPv4 or bracketed IPv6 literal, or
// "localhost", each with an optional port; empty (a client that sent none) too. A DNS name is refused: a web page
// whose name an attacker rebinds to 127.0.0.1 (DNS rebinding) would otherwise read the console, pictures included,
// through a visitor's browser. Reach the console by address (or an ssh tunnel to 127.0.0.1).
bool console_host_allowed(std::string_view host);

// The token of an "Authorization: Bearer TOKEN" header; nullopt when the header is empty. A header of another
// scheme or a malformed one gives an empty string, which the access policy refuses as a wrong token (a client
// that sent credentials never gets an answer as if it had sent none).
std::optional<std::string> bearer_token(std::string_view authorization);

}  // namespace sluice
