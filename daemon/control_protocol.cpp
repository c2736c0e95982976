#include "daemon/control_protocol.hpp"

#include <cmath>
#include <cstddef>

#include "runtime/latency_budget_limit.hpp"
#include "runtime/utf8.hpp"

namespace sluice {
namespace {

using json = nlohmann::json;

struct RequestEntry {
  RequestKind kind;
  const char* name;
  bool mutating;
};
constexpr RequestEntry kRequests[] = {
    {RequestKind::version, "version", false},     {RequestKind::status, "status", false},
    {RequestKind::sources, "sources", false},     {RequestKind::trace, "trace", false},
    {RequestKind::pause, "pause", true},          {RequestKind::resume, "resume", true},
    {RequestKind::reload, "reload", true},        {RequestKind::stop, "stop", true},
    {RequestKind::source_add, "source-add", true}, {RequestKind::source_remove, "source-remove", true},
};

constexpr std::size_t kMaxNameBytes = 256;

// A string argument: absent is fine (nullopt, no error); present must be a non-empty string without NUL.
std::optional<std::string> string_argument(const json& request, const char* key, std::string& error,
                                           std::size_t max_bytes = std::string::npos) {
  const auto it = request.find(key);
  if (it == request.end()) return std::nullopt;
  if (!it->is_string()) {
    error = std::string("'") + key + "' must be a string";
    return std::nullopt;
  }
  std::string value = it->get<std::string>();
  if (value.empty()) error = std::string("'") + key + "' must not be empty";
  else if (value.find('\0') != std::string::npos) error = std::string("'") + key + "' must not contain NUL";
  else if (value.size() > max_bytes)
    error = std::string("'") + key + "' is longer than " + std::to_string(max_bytes) + " bytes";
  if (!error.empty()) return std::nullopt;
  return value;
}

std::optional<bool> bool_argument(const json& request, const char* key, std::string& error) {
  const auto it = request.find(key);
  if (it == request.end()) return std::nullopt;
  if (!it->is_boolean()) {
    error = std::string("'") + key + "' must be true or false";
    return std::nullopt;
  }
  return it->get<bool>();
}

std::optional<double> number_argument(const json& request, const char* key, std::string& error) {
  const auto it = request.find(key);
  if (it == request.end()) return std::nullopt;
  if (!it->is_number()) {
    error = std::string("'") + key + "' must be a number";
    return std::nullopt;
  }
  const double v = it->get<double>();
  if (!std::isfinite(v)) {
    error = std::string("'") + key + "' must be a finite number";
    return std::nullopt;
  }
  return v;
}

// Fills the arguments of `out.kind` from `request`; returns the first problem, or "".
std::string read_arguments(const json& request, ControlRequest& out) {
  std::string error;
  out.token = string_argument(request, "token", error, 4096);
  if (!error.empty()) return error;
  switch (out.kind) {
    case RequestKind::trace: {
      const auto seconds = number_argument(request, "seconds", error);
      if (!error.empty() || !seconds || !(*seconds > 0 && *seconds <= 60))
        return "trace needs 'seconds', a number in (0, 60]";
      out.trace_seconds = *seconds;
      return {};
    }
    case RequestKind::reload:
      out.reload_path = string_argument(request, "path", error, 4096);
      return error.empty() ? "" : "reload: " + error;
    case RequestKind::source_add: {
      auto uri = string_argument(request, "uri", error, 4096);
      if (!error.empty() || !uri) return "source-add needs 'uri', a non-empty string";
      out.source.uri = std::move(*uri);
      out.source.name = string_argument(request, "name", error, kMaxNameBytes);
      if (error.empty()) out.source.leaky = bool_argument(request, "leaky", error);
      if (error.empty()) out.source.loop = bool_argument(request, "loop", error);
      if (error.empty()) out.source.rate_limit = number_argument(request, "rate_limit", error);
      if (error.empty() && out.source.rate_limit && *out.source.rate_limit < 0)
        error = "'rate_limit' must be >= 0 (frames per second, 0 = unlimited)";
      if (error.empty()) out.source.latency_budget_ms = number_argument(request, "latency_budget_ms", error);
      if (error.empty() && out.source.latency_budget_ms &&
          !(*out.source.latency_budget_ms >= 0 && *out.source.latency_budget_ms <= kMaxLatencyBudgetMs))
        error = "'latency_budget_ms' must be in 0..3600000 (milliseconds, 0 = none)";
      return error.empty() ? "" : "source-add: " + error;
    }
    case RequestKind::source_remove: {
      auto which = string_argument(request, "source", error, kMaxNameBytes);
      if (!error.empty() || !which) return "source-remove needs 'source': an id or a name (a string)";
      out.source_ref = std::move(*which);
      return {};
    }
    default:
      return {};
  }
}

}  // namespace

const char* const kRequestList =
    "version, status, sources, trace, pause, resume, reload, stop, source-add, source-remove";

std::string_view request_name(RequestKind kind) {
  for (const auto& r : kRequests)
    if (r.kind == kind) return r.name;
  return "?";
}

bool is_mutating(RequestKind kind) {
  for (const auto& r : kRequests)
    if (r.kind == kind) return r.mutating;
  return true;
}

std::string safe_message(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return to_valid_utf8(text);
  return to_valid_utf8(text.substr(0, limit)) + "\xE2\x80\xA6";  // U+2026
}

ParsedLine parse_request_line(std::string_view line) {
  ParsedLine out;
  json request;
  try {
    request = json::parse(line.begin(), line.end());
  } catch (const json::exception& e) {
    // parse_error (syntax, invalid UTF-8), out_of_range (a number too large for a double), ...: the
    // message may quote the offending bytes, so it is made valid UTF-8 and short.
    out.error = "malformed JSON: " + safe_message(e.what());
    return out;
  }
  if (!request.is_object()) {
    out.error = std::string("expected a JSON object with a string 'request' (one of ") + kRequestList + ")";
    return out;
  }
  const auto name = request.find("request");
  if (name == request.end() || !name->is_string()) {
    out.error = std::string("expected a string 'request' (one of ") + kRequestList + ")";
    return out;
  }
  const std::string& wanted = name->get_ref<const std::string&>();
  ControlRequest parsed;
  bool known = false;
  for (const auto& r : kRequests)
    if (wanted == r.name) {
      parsed.kind = r.kind;
      known = true;
    }
  if (!known) {
    out.error = "unknown request '" + safe_message(wanted, 64) + "' (" + kRequestList + ")";
    return out;
  }
  if (std::string why = read_arguments(request, parsed); !why.empty()) {
    out.error = std::move(why);
    return out;
  }
  out.request = std::move(parsed);
  return out;
}

json error_reply(std::string_view message) { return {{"ok", false}, {"error", to_valid_utf8(message)}}; }

namespace {

// Every string (and key) made valid UTF-8 the same way to_valid_utf8 does, so a name shown in a reply is
// the name a later request can use to find it.
json with_valid_strings(const json& value) {
  if (value.is_string()) return to_valid_utf8(value.get_ref<const std::string&>());
  if (value.is_array()) {
    json out = json::array();
    for (const auto& item : value) out.push_back(with_valid_strings(item));
    return out;
  }
  if (value.is_object()) {
    json out = json::object();
    for (const auto& [key, item] : value.items()) out[to_valid_utf8(key)] = with_valid_strings(item);
    return out;
  }
  return value;
}

}  // namespace

std::string serialize_reply(const json& reply) {
  try {
    return reply.dump() + "\n";  // the common case: everything is valid UTF-8 already
  } catch (const json::type_error&) {
    return with_valid_strings(reply).dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  }
}

std::string redact_file_excerpts(std::string_view message) {
  // Keep the location prefix ("PATH:LINE:COL: ") as it is: the path is the peer's own request.
  std::size_t keep = 0;
  for (std::size_t i = 0; i < message.size(); ++i) {
    if (message[i] != ':') continue;
    std::size_t j = i + 1, line_digits = 0, col_digits = 0;
    while (j < message.size() && message[j] >= '0' && message[j] <= '9') ++j, ++line_digits;
    if (line_digits == 0 || j >= message.size() || message[j] != ':') continue;
    ++j;
    while (j < message.size() && message[j] >= '0' && message[j] <= '9') ++j, ++col_digits;
    if (col_digits == 0 || j >= message.size() || message[j] != ':') continue;
    keep = j + 1;
    break;
  }
  std::string out = to_valid_utf8(message.substr(0, keep));
  const std::string_view rest = message.substr(keep);
  for (std::size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    if (c != '\'' && c != '"') {
      out += c;
      continue;
    }
    const std::size_t end = rest.find(c, i + 1);
    out += c;
    out += "\xE2\x80\xA6";  // …
    out += c;
    if (end == std::string_view::npos) break;
    i = end;
  }
  return to_valid_utf8(out);
}

}  // namespace sluice
