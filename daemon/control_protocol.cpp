#include "daemon/control_protocol.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "runtime/utf8.hpp"

namespace sluice {
namespace {

using json = nlohmann::json;

// Checks `argument` in `request` and copies it to `out`; returns the problem, or "".
std::string read_argument(const json& request, const RequestSpec& spec, const Argument& argument, json& out) {
  const auto it = request.find(argument.key);
  if (it == request.end()) {
    if (!argument.required) return {};
    return std::string(spec.name) + " needs '" + std::string(argument.key) + "': " + describe(argument);
  }
  if (auto why = check_argument(argument, *it)) return std::string(spec.name) + ": " + *why;
  out[std::string(argument.key)] = *it;
  return {};
}

}  // namespace

std::string_view peer_class_name(PeerClass c) {
  switch (c) {
    case PeerClass::tcp:
      return "tcp peers";
    case PeerClass::reader:
      return "local readers";
    case PeerClass::admin:
      return "admins";
  }
  return "peers";
}

const json* ControlRequest::find(const Argument& argument, ArgumentKind kind) const {
  const auto& own = request_spec(this->kind).arguments;
  const bool has = std::find(own.begin(), own.end(), &argument) != own.end();
  if (!has || argument.kind != kind)
    throw std::logic_error("the handler of " + std::string(request_name(this->kind)) + " asked for '" +
                           std::string(argument.key) + (has ? "' as another kind" : "', not one of its arguments"));
  const auto it = arguments.find(argument.key);
  return it == arguments.end() ? nullptr : &*it;
}

std::optional<std::string> ControlRequest::text(const Argument& argument) const {
  const json* v = find(argument, ArgumentKind::string);
  if (!v) return std::nullopt;
  return v->get<std::string>();
}

std::optional<double> ControlRequest::number(const Argument& argument) const {
  const json* v = find(argument, ArgumentKind::number);
  if (!v) return std::nullopt;
  return v->get<double>();
}

std::optional<bool> ControlRequest::flag(const Argument& argument) const {
  const json* v = find(argument, ArgumentKind::boolean);
  if (!v) return std::nullopt;
  return v->get<bool>();
}

std::string safe_message(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return to_valid_utf8(text);
  return to_valid_utf8(text.substr(0, limit)) + "\xE2\x80\xA6";  // U+2026
}

ParsedLine parse_request_line(std::string_view line) {
  ParsedLine out;
  json request;
  // A key given twice would otherwise keep its last value ({"request":"status","request":"stop"} stops the
  // daemon while a filter that reads the first sees a status): every object, at any depth, is checked.
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::optional<std::string> duplicate_key;
  const json::parser_callback_t find_duplicates = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys_of_open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!keys_of_open_objects.empty()) keys_of_open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !keys_of_open_objects.empty() && !duplicate_key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!keys_of_open_objects.back().insert(key).second) duplicate_key = key;
    }
    return true;
  };
  try {
    request = json::parse(line.begin(), line.end(), find_duplicates);
  } catch (const json::exception& e) {
    // parse_error (syntax, invalid UTF-8), out_of_range (a number too large for a double), ...: the
    // message may quote the offending bytes, so it is made valid UTF-8 and short.
    out.error = "malformed JSON: " + safe_message(e.what());
    return out;
  }
  if (duplicate_key) {
    out.error = "duplicate key '" + safe_message(*duplicate_key, 64) + "': each key may appear once in a request";
    return out;
  }
  if (!request.is_object()) {
    out.error = "expected a JSON object with a string '" + std::string(kRequestKey) + "' (one of " + request_list() + ")";
    return out;
  }
  const auto name = request.find(kRequestKey);
  if (name == request.end() || !name->is_string()) {
    out.error = "expected a string '" + std::string(kRequestKey) + "' (one of " + request_list() + ")";
    return out;
  }
  const std::string& wanted = name->get_ref<const std::string&>();
  const RequestSpec* spec = find_request(wanted);
  if (!spec) {
    out.error = "unknown request '" + safe_message(wanted, 64) + "' (" + request_list() + ")";
    return out;
  }
  ControlRequest parsed;
  parsed.kind = spec->kind;
  json token;
  if (std::string why = read_argument(request, *spec, arg::token, token); !why.empty()) {
    out.error = std::move(why);
    return out;
  }
  if (!token.empty()) parsed.token = token.begin()->get<std::string>();
  for (const Argument* argument : spec->arguments)
    if (std::string why = read_argument(request, *spec, *argument, parsed.arguments); !why.empty()) {
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
  // The location prefix ("PATH:LINE:COL: ") stays as it is: the path is the peer's own request. Only a prefix
  // before any quote counts: "LINE:COL:" inside an excerpt must not make the excerpt part of the prefix.
  const std::size_t first_quote = message.find_first_of("'\"");
  std::size_t keep = 0;
  for (std::size_t i = 0; i < message.size() && i < first_quote; ++i) {
    if (message[i] != ':') continue;
    std::size_t j = i + 1, line_digits = 0, col_digits = 0;
    while (j < message.size() && message[j] >= '0' && message[j] <= '9') ++j, ++line_digits;
    if (line_digits == 0 || j >= message.size() || message[j] != ':') continue;
    ++j;
    while (j < message.size() && message[j] >= '0' && message[j] <= '9') ++j, ++col_digits;
    if (col_digits == 0 || j >= message.size() || message[j] != ':' || j >= first_quote) continue;
    keep = j + 1;
    break;
  }
  const std::string_view rest = message.substr(keep);
  // An excerpt may hold quotes itself (a key "it's"), so where one ends cannot be told from the text: everything
  // from the first quote to the last one goes, excerpts and sluice's words between them alike. Every excerpt is
  // closed by the quote sluice put after it, so the text after the last quote is sluice's own (" (known: ...)").
  // With an odd number of quotes that cannot be relied on (an excerpt cut short): everything after the first goes.
  const std::size_t from = rest.find_first_of("'\"");
  if (from == std::string_view::npos) return to_valid_utf8(message);
  const std::size_t to = rest.find_last_of("'\"");
  std::size_t quotes = 0;
  for (const char c : rest) quotes += c == '\'' || c == '"';
  std::string out = to_valid_utf8(message.substr(0, keep));
  out += rest.substr(0, from);
  out += "'\xE2\x80\xA6'";  // '…'
  if (quotes % 2 == 0) out += rest.substr(to + 1);
  return to_valid_utf8(out);
}

}  // namespace sluice
