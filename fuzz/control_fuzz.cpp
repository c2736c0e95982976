// libFuzzer harness for the control protocol's untrusted edge: arbitrary bytes as control lines, split as the
// server splits them, through parse_request_line and a dispatcher over a minimal handler that answers like
// sluiced (the access policy's decisions, replies echoing names, URIs and paths). Every reply must be one
// line of valid UTF-8 that parses back as JSON with a boolean "ok"; nothing may throw out of a line.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/access_policy.hpp"
#include "daemon/control_protocol.hpp"
#include "runtime/utf8.hpp"

namespace {

using namespace sluice;

const AccessPolicy& policy() {
  static const AccessPolicy p = [] {
    AccessSettings s;
    s.control_token = "fuzz-token-0123456789";
    s.allow_source_hosts = {"cam1.local", "10.0.0.5:8554"};
    s.input_roots = {"/tmp"};
    s.config_file = "/tmp/pipeline.yaml";
    return AccessPolicy(s);
  }();
  return p;
}

// Like Service::dispatch: the access policy first, then one case per request (no default, so a request
// added to the table without a case here is a compiler warning).
nlohmann::json handle(const ControlRequest& r, const PeerCredentials& peer) {
  if (auto why = policy().check_request(peer, r.kind, r.token)) return error_reply(*why);
  switch (r.kind) {
    case RequestKind::version:
    case RequestKind::status:
    case RequestKind::sources:
    case RequestKind::pause:
    case RequestKind::resume:
    case RequestKind::stop:
      return {{"ok", true}, {"request", std::string(request_name(r.kind))}};
    case RequestKind::trace:
      return {{"ok", true}, {"seconds", *r.number(arg::seconds)}};
    case RequestKind::source_add: {
      const std::string uri = *r.text(arg::uri);
      if (auto why = policy().check_source_uri(uri)) return error_reply(*why);
      return {{"ok", true}, {"name", r.text(arg::name).value_or(uri)}};
    }
    case RequestKind::source_remove:
      return error_reply("no source '" + *r.text(arg::source) + "'");
    case RequestKind::reload: {
      std::string resolved;
      if (const auto path = r.text(arg::path)) {
        if (auto why = policy().check_reload_path(*path, resolved)) return error_reply(*why);
        return error_reply(redact_file_excerpts(*path + ":1:1: unknown key '" + *path + "'"));
      }
      return {{"ok", true}};
    }
  }
  __builtin_trap();  // a kind outside the enum: the parser made it up
}

void check_reply(const std::string& line) {
  if (line.empty() || line.back() != '\n' || line.find('\n') != line.size() - 1) __builtin_trap();
  if (!valid_utf8(line)) __builtin_trap();
  const auto back = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (back.is_discarded() || !back.is_object() || !back.contains("ok") || !back["ok"].is_boolean()) __builtin_trap();
}

void one_line(std::string_view line, const PeerCredentials& peer) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string_view::npos) return;
  const ParsedLine parsed = parse_request_line(line);
  if (!parsed.request) {
    if (parsed.error.empty()) __builtin_trap();
    return check_reply(serialize_reply(error_reply(parsed.error)));
  }
  check_reply(serialize_reply(handle(*parsed.request, peer)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;  // the server's request limit
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  PeerCredentials unix_peer;
  unix_peer.known = true;
  unix_peer.uid = 4242;
  unix_peer.remote = "pid 1 uid 4242 gid 4242";
  PeerCredentials tcp_peer;
  tcp_peer.tcp = true;
  tcp_peer.remote = "tcp 127.0.0.1:1";
  std::size_t start = 0;
  while (start <= input.size()) {
    const std::size_t nl = input.find('\n', start);
    const std::string_view line = input.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    one_line(line, unix_peer);
    one_line(line, tcp_peer);
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  return 0;
}
