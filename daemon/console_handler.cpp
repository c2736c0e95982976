#include "daemon/console_handler.hpp"

#include <string_view>

#include "daemon/console_assets.hpp"
#include "daemon/console_routes.hpp"
#include "daemon/control_protocol.hpp"

namespace sluice {

namespace {

constexpr std::string_view kJson = "application/json";

HttpReply text(unsigned status, std::string body) { return {status, "text/plain; charset=utf-8", std::move(body)}; }

// A control reply as HTTP: ok 200; an access refusal 403; any other error 409 (the request was understood).
HttpReply json_reply(const nlohmann::json& reply) {
  unsigned status = 200;
  if (!reply.value("ok", false)) {
    const std::string error = reply.contains("error") && reply["error"].is_string() ? reply["error"].get<std::string>() : "";
    status = error.rfind("permission denied", 0) == 0 ? 403 : 409;
  }
  return {status, std::string(kJson), serialize_reply(reply)};
}

}  // namespace

void ConsoleHandler::operator()(const HttpRequestView& request, HttpRespond respond) const {
  if (!console_host_allowed(request.host))
    return respond(text(421, "misdirected request: reach the console by its address (e.g. http://127.0.0.1:PORT/), "
                             "not by a DNS name (refused against DNS rebinding)\n"));
  const ConsoleRoute route = route_console(request.method, request.target);
  switch (route.kind) {
    case ConsoleRouteKind::bad_request:
      return respond(text(400, "bad request: the target must be a plain path (no '..', '%', '\\\\' or control bytes)\n"));
    case ConsoleRouteKind::not_found:
      return respond(text(404, "not found: the console is at /\n"));
    case ConsoleRouteKind::method_not_allowed: {
      HttpReply r = text(405, "method not allowed: use " + route.allow + "\n");
      r.allow = route.allow;
      return respond(std::move(r));
    }
    case ConsoleRouteKind::asset: {
      const ConsoleAsset* asset = find_console_asset(route.asset);
      if (!asset) return respond(text(404, "not found\n"));
      return respond({200, std::string(asset->content_type), std::string(asset->data)});
    }
    case ConsoleRouteKind::frame: {
      if (!thumbnails_) return respond(text(404, "no pictures: this sluiced was built without the media library\n"));
      auto picture = thumbnails_->jpeg(route.source_id);
      if (!picture) return respond(text(404, "no frame of source " + std::to_string(route.source_id) + " yet\n"));
      HttpReply r{200, "image/jpeg", std::move(picture->jpeg)};
      // Which frame it is (FrameMeta::sequence) and whether detections are drawn on it: for tests and tools.
      r.headers = {{"X-Sluice-Frame", std::to_string(picture->sequence)}, {"X-Sluice-Drawn", picture->drawn ? "1" : "0"}};
      return respond(std::move(r));
    }
    case ConsoleRouteKind::status: {
      ParsedLine parsed = parse_request_line(R"({"request":"status"})");
      return control(*parsed.request, request, std::move(respond));
    }
    case ConsoleRouteKind::control: {
      std::string_view line = request.body;
      if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
      if (line.find('\n') != std::string_view::npos)
        return respond({400, std::string(kJson), serialize_reply(error_reply("the body must be one request line"))});
      ParsedLine parsed = parse_request_line(line);
      if (!parsed.request) return respond({400, std::string(kJson), serialize_reply(error_reply(parsed.error))});
      return control(*parsed.request, request, std::move(respond));
    }
  }
}

void ConsoleHandler::control(const ControlRequest& parsed, const HttpRequestView& http, HttpRespond respond) const {
  ControlRequest request = parsed;
  // The header's token wins over one in the body; either way the policy compares it (constant time).
  if (auto token = bearer_token(http.authorization)) request.token = std::move(*token);
  PeerCredentials peer;
  peer.tcp = true;
  peer.remote = "console " + http.remote;
  peer.peer_class = PeerClass::tcp;
  dispatch_(request, peer, [respond = std::move(respond)](nlohmann::json reply) { respond(json_reply(reply)); });
}

}  // namespace sluice
