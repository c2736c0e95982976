// The console's routing of client bytes (daemon/console_routes.hpp): every page and API path, methods, queries,
// hostile targets, and the Authorization header.
#include <catch2/catch.hpp>

#include <string>

#include "daemon/console_routes.hpp"

using namespace sluice;

TEST_CASE("console routes the page, the status, frames and control") {
  CHECK(route_console("GET", "/").kind == ConsoleRouteKind::asset);
  CHECK(route_console("GET", "/").asset == "index.html");
  CHECK(route_console("HEAD", "/index.html").asset == "index.html");
  CHECK(route_console("GET", "/console.js").asset == "console.js");
  CHECK(route_console("GET", "/console.css?v=2").asset == "console.css");
  CHECK(route_console("GET", "/api/status").kind == ConsoleRouteKind::status);
  CHECK(route_console("POST", "/api/control").kind == ConsoleRouteKind::control);
  const ConsoleRoute frame = route_console("GET", "/api/frame/17?t=123");
  CHECK(frame.kind == ConsoleRouteKind::frame);
  CHECK(frame.source_id == 17);
  CHECK(route_console("GET", "/api/frame/4294967295").source_id == 4294967295u);
}

TEST_CASE("console answers a known path with another method by 405 naming the allowed ones") {
  const ConsoleRoute post_page = route_console("POST", "/");
  CHECK(post_page.kind == ConsoleRouteKind::method_not_allowed);
  CHECK(post_page.allow == "GET, HEAD");
  const ConsoleRoute get_control = route_console("GET", "/api/control");
  CHECK(get_control.kind == ConsoleRouteKind::method_not_allowed);
  CHECK(get_control.allow == "POST");
  CHECK(route_console("DELETE", "/api/status").kind == ConsoleRouteKind::method_not_allowed);
  CHECK(route_console("get", "/api/status").kind == ConsoleRouteKind::method_not_allowed);  // methods are case-sensitive
}

TEST_CASE("console refuses targets that are not plain paths") {
  for (const char* target : {"", "api/status", "*", "http://x/", "/../etc/passwd", "/api/../api/status", "/%2e%2e/",
                             "//api/status", "/a\\b", "/a b", "/a\tb", "/\x7f", "/\xc3\xa9", "/#frag"})
    CHECK(route_console("GET", target).kind == ConsoleRouteKind::bad_request);
}

TEST_CASE("console answers unknown paths and bad frame ids with 404") {
  for (const char* target : {"/metrics2", "/api", "/api/", "/api/frame/", "/api/frame/x", "/api/frame/-1",
                             "/api/frame/4294967296", "/api/frame/1/2", "/api/frame/12345678901", "/api/frame/+1",
                             "/console.js/", "/index.htm", "/CONSOLE.JS"})
    CHECK(route_console("GET", target).kind == ConsoleRouteKind::not_found);
}

TEST_CASE("console reads the token from a Bearer header only") {
  CHECK_FALSE(bearer_token("").has_value());
  CHECK(bearer_token("Bearer abcdefghijklmnop") == std::string("abcdefghijklmnop"));
  // Credentials of another shape are a wrong token (refused), never "no token" (a read).
  CHECK(bearer_token("Basic dXNlcjpwYXNz") == std::string());
  CHECK(bearer_token("Bearer ") == std::string());
  CHECK(bearer_token("bearer abc") == std::string());
}

TEST_CASE("console accepts Host headers that name the machine by address only") {
  for (const char* host : {"", "127.0.0.1", "127.0.0.1:8080", "10.1.2.3:1", "localhost", "LocalHost:8080", "[::1]",
                           "[::1]:8080", "[fe80::1%25eth0]:1"})
    CHECK(console_host_allowed(host) == (std::string(host).find('%') == std::string::npos));
  for (const char* host : {"evil.example", "evil.example:8080", "127.0.0.1.nip.io", "localhost.evil", "1.2.3",
                           "1.2.3.4.5", "256.1.1.1", "1.2.3.4:", "1.2.3.4:123456", "[::1", "[]:80", "[::1]x",
                           "[::1]:", "::1", "1.2.3.-4", "0x7f.0.0.1", "127.0.0.1:80:80"})
    CHECK_FALSE(console_host_allowed(host));
}
