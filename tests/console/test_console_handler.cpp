// The console's request handling (daemon/console_handler.hpp) with a recording dispatcher and a fake thumbnail
// tap: what reaches the control dispatcher (as a TCP peer, with the header's token), how replies map to HTTP
// statuses, bad bodies, the built-in page, and frames with their sequence header.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "daemon/console_assets.hpp"
#include "daemon/console_handler.hpp"

using namespace sluice;

namespace {

struct Recorded {
  std::vector<ControlRequest> requests;
  std::vector<PeerCredentials> peers;
  nlohmann::json answer = {{"ok", true}, {"state", "running"}};
};

class FakeThumbnails final : public ThumbnailTap {
 public:
  void put(const FrameMeta&, const FrameTarget&) override {}
  std::optional<Picture> jpeg(std::uint32_t id) override {
    asked.push_back(id);
    if (id != 3) return std::nullopt;
    return Picture{"\xff\xd8jpeg", 41, true};
  }
  std::size_t watched() const override { return asked.size(); }
  std::vector<std::uint32_t> asked;
};

HttpReply ask(const ConsoleHandler& handler, std::string method, std::string target, std::string body = "",
              std::string authorization = "", std::string host = "127.0.0.1:8080") {
  HttpRequestView request{std::move(method), std::move(target), std::move(authorization), std::move(host), std::move(body),
                          "127.0.0.1:5555"};
  std::optional<HttpReply> got;
  handler(request, [&](HttpReply r) { got = std::move(r); });
  REQUIRE(got.has_value());
  return *got;
}

ConsoleHandler make(Recorded& rec, std::shared_ptr<ThumbnailTap> thumbnails = nullptr) {
  return ConsoleHandler(
      [&rec](const ControlRequest& r, const PeerCredentials& p, ControlServer::Reply reply) {
        rec.requests.push_back(r);
        rec.peers.push_back(p);
        reply(rec.answer);
      },
      std::move(thumbnails));
}

}  // namespace

TEST_CASE("console serves its built-in page") {
  Recorded rec;
  const auto handler = make(rec);
  const HttpReply page = ask(handler, "GET", "/");
  CHECK(page.status == 200);
  CHECK(page.content_type == "text/html; charset=utf-8");
  CHECK(page.body.find("/console.js") != std::string::npos);
  CHECK(ask(handler, "GET", "/console.js").content_type == "text/javascript; charset=utf-8");
  CHECK(ask(handler, "GET", "/console.css").status == 200);
  REQUIRE(find_console_asset("console.js") != nullptr);
  CHECK(find_console_asset("nope") == nullptr);
  CHECK(rec.requests.empty());
}

TEST_CASE("console asks the dispatcher for status as a TCP peer without a token") {
  Recorded rec;
  const auto handler = make(rec);
  const HttpReply r = ask(handler, "GET", "/api/status");
  CHECK(r.status == 200);
  CHECK(r.content_type == "application/json");
  REQUIRE(rec.requests.size() == 1);
  CHECK(rec.requests[0].kind == RequestKind::status);
  CHECK_FALSE(rec.requests[0].token.has_value());
  CHECK(rec.peers[0].tcp);
  CHECK_FALSE(rec.peers[0].known);
  CHECK(rec.peers[0].remote == "console 127.0.0.1:5555");
}

TEST_CASE("console hands control requests on with the Bearer token") {
  Recorded rec;
  const auto handler = make(rec);
  CHECK(ask(handler, "POST", "/api/control", "{\"request\":\"pause\"}\n", "Bearer 0123456789abcdef").status == 200);
  REQUIRE(rec.requests.size() == 1);
  CHECK(rec.requests[0].kind == RequestKind::pause);
  CHECK(rec.requests[0].token == std::string("0123456789abcdef"));
  // A header of another scheme is sent on as an empty (wrong) token, not as none.
  ask(handler, "POST", "/api/control", "{\"request\":\"resume\"}", "Basic abc");
  CHECK(rec.requests[1].token == std::string());
}

TEST_CASE("console maps refusals to 403 and other errors to 409") {
  Recorded rec;
  const auto handler = make(rec);
  rec.answer = {{"ok", false}, {"error", "permission denied: wrong token"}};
  const HttpReply refused = ask(handler, "POST", "/api/control", "{\"request\":\"pause\"}", "Bearer wrong");
  CHECK(refused.status == 403);
  CHECK(nlohmann::json::parse(refused.body)["error"] == "permission denied: wrong token");
  rec.answer = {{"ok", false}, {"error", "sluiced is stopping"}};
  CHECK(ask(handler, "POST", "/api/control", "{\"request\":\"pause\"}").status == 409);
}

TEST_CASE("console answers malformed control bodies with 400 before the dispatcher") {
  Recorded rec;
  const auto handler = make(rec);
  for (const char* body : {"", "not json", "{\"request\":\"nope\"}", "{\"request\":\"pause\"}\n{\"request\":\"stop\"}",
                           "{\"request\":\"trace\",\"seconds\":1e9}", "[1,2]", "{\"request\":\"pause\",\"request\":\"stop\"}"}) {
    const HttpReply r = ask(handler, "POST", "/api/control", body);
    CHECK(r.status == 400);
    CHECK_FALSE(nlohmann::json::parse(r.body)["ok"].get<bool>());
  }
  CHECK(rec.requests.empty());
}

TEST_CASE("console answers bad targets, unknown paths and wrong methods") {
  Recorded rec;
  const auto handler = make(rec);
  CHECK(ask(handler, "GET", "/../x").status == 400);
  CHECK(ask(handler, "GET", "/nope").status == 404);
  const HttpReply wrong = ask(handler, "GET", "/api/control");
  CHECK(wrong.status == 405);
  CHECK(wrong.allow == "POST");
  CHECK(rec.requests.empty());
}

TEST_CASE("console serves frames from the thumbnail tap with their sequence") {
  Recorded rec;
  CHECK(ask(make(rec), "GET", "/api/frame/3").status == 404);  // no tap: no pictures, said so
  auto thumbnails = std::make_shared<FakeThumbnails>();
  const auto handler = make(rec, thumbnails);
  const HttpReply r = ask(handler, "GET", "/api/frame/3?t=1");
  CHECK(r.status == 200);
  CHECK(r.content_type == "image/jpeg");
  CHECK(r.body == "\xff\xd8jpeg");
  CHECK(r.headers == std::vector<std::pair<std::string, std::string>>{{"X-Sluice-Frame", "41"}, {"X-Sluice-Drawn", "1"}});
  CHECK(ask(handler, "GET", "/api/frame/4").status == 404);
  CHECK(thumbnails->asked == std::vector<std::uint32_t>{3, 4});
}

TEST_CASE("console refuses requests for a DNS name with 421 (DNS rebinding)") {
  Recorded rec;
  const auto handler = make(rec);
  CHECK(ask(handler, "GET", "/api/status", "", "", "attacker.example:8080").status == 421);
  CHECK(ask(handler, "POST", "/api/control", "{\"request\":\"status\"}", "", "attacker.example").status == 421);
  CHECK(ask(handler, "GET", "/", "", "", "localhost:8080").status == 200);
  CHECK(rec.requests.empty());
}
