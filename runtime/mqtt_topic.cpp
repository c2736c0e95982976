#include "runtime/mqtt_topic.hpp"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include "runtime/utf8.hpp"

namespace sluice::mqtt {
namespace {

// The code point starting at s[i] of valid UTF-8, and its length in bytes.
std::pair<std::uint32_t, std::size_t> code_point(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[i + k])); };
  const std::uint32_t c = b(0);
  if (c < 0x80) return {c, 1};
  if (c < 0xE0) return {((c & 0x1F) << 6) | (b(1) & 0x3F), 2};
  if (c < 0xF0) return {((c & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F), 3};
  return {((c & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F), 4};
}

bool is_control(std::uint32_t c) { return c < 0x20 || (c >= 0x7F && c <= 0x9F); }

std::string u_plus(std::uint32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  return buf;
}

[[noreturn]] void refuse(const std::string& what, std::size_t at) {
  throw std::invalid_argument("the topic " + what + " at byte " + std::to_string(at));
}

}  // namespace

TopicTemplate::TopicTemplate(std::string_view text) : text_(text) {
  if (text.empty()) throw std::invalid_argument("the topic is empty");
  if (text.size() > kMaxTemplateBytes)
    throw std::invalid_argument("the topic is " + std::to_string(text.size()) + " bytes, more than " +
                                std::to_string(kMaxTemplateBytes));
  if (!valid_utf8(text)) throw std::invalid_argument("the topic is not valid UTF-8");
  if (text.front() == '$') throw std::invalid_argument("the topic starts with '$' (reserved for the broker's own topics)");
  std::string literal;
  for (std::size_t i = 0; i < text.size();) {
    const auto [c, len] = code_point(text, i);
    if (c == '+' || c == '#') refuse(std::string("holds the wildcard '") + static_cast<char>(c) + "' (for subscribers only)", i);
    if (is_control(c)) refuse("holds the control character " + u_plus(c), i);
    if (c == '}') refuse("holds a '}' without its '{'", i);
    if (c == '{') {
      Part part;
      std::size_t skip;
      if (text.substr(i).starts_with("{source}")) part = Part::source, skip = 8;
      else if (text.substr(i).starts_with("{input}")) part = Part::input, skip = 7;
      else refuse("holds a '{' that does not start {source} or {input}", i);
      if (!literal.empty()) parts_.emplace_back(Part::literal, std::move(literal));
      literal.clear();
      parts_.emplace_back(part, std::string());
      i += skip;
      continue;
    }
    literal.append(text.substr(i, len));
    i += len;
  }
  if (!literal.empty()) parts_.emplace_back(Part::literal, std::move(literal));
}

std::string TopicTemplate::expand(std::string_view source, std::string_view input) const {
  std::string topic;
  for (const auto& [part, literal] : parts_) {
    if (part == Part::literal) topic += literal;
    else topic += topic_level(part == Part::source ? source : input);
  }
  return topic;
}

bool TopicTemplate::uses_input() const {
  for (const auto& part : parts_)
    if (part.first == Part::input) return true;
  return false;
}

std::string MqttUri::where() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

MqttUri parse_mqtt_uri(std::string_view uri) {
  if (uri.starts_with("mqtts://") || uri.starts_with("ssl://"))
    throw std::invalid_argument("TLS (mqtts://) is not supported; use mqtt:// on a trusted network");
  if (!uri.starts_with("mqtt://")) throw std::invalid_argument("it does not start with mqtt://");
  std::string_view rest = uri.substr(7);
  const std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos) throw std::invalid_argument("it has no /TOPIC after the host");
  std::string_view authority = rest.substr(0, slash);
  const std::string_view topic = rest.substr(slash + 1);
  if (authority.find('@') != std::string_view::npos)
    throw std::invalid_argument("it holds a user or password; give them in SLUICE_MQTT_USERNAME and "
                                "SLUICE_MQTT_PASSWORD instead");
  MqttUri out;
  std::string_view port;
  if (authority.starts_with("[")) {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) throw std::invalid_argument("an IPv6 host lacks its ']'");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') throw std::invalid_argument("something other than :PORT follows the IPv6 host");
      port = after.substr(1);
      if (port.empty()) throw std::invalid_argument("the port after ':' is empty");
    }
    for (const char c : out.host)
      if (!(std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.'))
        throw std::invalid_argument("the IPv6 host holds a character other than hex digits, ':' and '.'");
  } else {
    const std::size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) throw std::invalid_argument("the port after ':' is empty");
    }
    for (const char c : out.host)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'))
        throw std::invalid_argument("the host holds a character other than letters, digits, '.', '-' and '_'");
  }
  if (out.host.empty()) throw std::invalid_argument("the host is empty");
  if (out.host.size() > 253) throw std::invalid_argument("the host is longer than 253 characters");
  if (!port.empty()) {
    int value = 0;
    for (const char c : port) {
      if (c < '0' || c > '9') throw std::invalid_argument("the port is not a number");
      value = value * 10 + (c - '0');
      if (value > 65535) throw std::invalid_argument("the port is above 65535");
    }
    if (value == 0) throw std::invalid_argument("the port is 0");
    out.port = value;
  }
  if (topic.find('?') != std::string_view::npos)
    throw std::invalid_argument("it takes no ?options (qos, client_id, keepalive_s are the stage's keys)");
  out.topic = TopicTemplate(topic);
  return out;
}

std::string topic_level(std::string_view value) {
  const std::string valid = to_valid_utf8(value);
  std::string out;
  for (std::size_t i = 0; i < valid.size();) {
    const auto [c, len] = code_point(valid, i);
    if (out.size() + len > kMaxLevelBytes) break;
    if (c == '/' || c == '+' || c == '#' || is_control(c) || (c == '$' && i == 0)) out += '_';
    else out.append(valid, i, len);
    i += len;
  }
  return out.empty() ? "_" : out;
}

}  // namespace sluice::mqtt
