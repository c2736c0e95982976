#include "runtime/utf8.hpp"

#include <cstddef>
#include <cstdint>

namespace sluice {
namespace {

// Length of the well-formed sequence starting at s[i], or 0 when ill-formed; `valid_prefix` is then the
// number of bytes that still could have begun a sequence (at least 1): they become one U+FFFD together.
std::size_t sequence_at(std::string_view s, std::size_t i, std::size_t& valid_prefix) {
  const auto byte = [&](std::size_t k) { return static_cast<std::uint8_t>(s[k]); };
  const std::uint8_t b0 = byte(i);
  valid_prefix = 1;
  if (b0 < 0x80) return 1;
  std::size_t length = 0;
  std::uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) length = 2;
  else if (b0 == 0xE0) length = 3, lo = 0xA0;
  else if (b0 >= 0xE1 && b0 <= 0xEC) length = 3;
  else if (b0 == 0xED) length = 3, hi = 0x9F;  // no surrogates
  else if (b0 >= 0xEE && b0 <= 0xEF) length = 3;
  else if (b0 == 0xF0) length = 4, lo = 0x90;
  else if (b0 >= 0xF1 && b0 <= 0xF3) length = 4;
  else if (b0 == 0xF4) length = 4, hi = 0x8F;  // nothing above U+10FFFF
  else return 0;                               // 0x80..0xC1, 0xF5..0xFF never start a sequence
  for (std::size_t k = 1; k < length; ++k) {
    if (i + k >= s.size()) return 0;
    const std::uint8_t b = byte(i + k);
    const std::uint8_t min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return 0;
    valid_prefix = k + 1;
  }
  return length;
}

}  // namespace

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    std::size_t prefix = 0;
    const std::size_t n = sequence_at(s, i, prefix);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t prefix = 0;
    const std::size_t n = sequence_at(s, i, prefix);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += prefix;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

std::string shown_uri(std::string_view uri) {
  const std::size_t scheme = uri.find("://");
  if (scheme == std::string_view::npos) return to_valid_utf8(uri);
  const std::size_t start = scheme + 3;
  std::size_t authority_end = uri.find_first_of("/?#", start);
  if (authority_end == std::string_view::npos) authority_end = uri.size();
  std::string out(uri.substr(0, start));
  const std::string_view authority = uri.substr(start, authority_end - start);
  if (const std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    out += "***";
    out += authority.substr(at);
  } else {
    out += authority;
  }
  const std::size_t hidden = uri.find_first_of("?#", authority_end);
  out += uri.substr(authority_end, (hidden == std::string_view::npos ? uri.size() : hidden) - authority_end);
  if (hidden != std::string_view::npos) out += "?***";
  return to_valid_utf8(out);
}

}  // namespace sluice
