#include "runtime/json_text.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

namespace sluice::json_text {

void append_string(std::string& out, std::string_view s) {
  bool plain = true;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    plain &= u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
  }
  if (!plain) {
    out += nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  out += '"';
  out += s;
  out += '"';
}

void append_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  // The routine dump itself calls for a double (its serializer's dump_float), so that records stay the same bytes.
  char buf[64];
  const char* end = nlohmann::detail::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<std::size_t>(end - buf));
}

}  // namespace sluice::json_text
