#pragma once
// JSON values appended to a text buffer byte for byte as nlohmann::json's compact dump writes them
// (dump(-1, ' ', false, error_handler_t::replace)), without building a json tree: for records written per frame
// (a hundred boxes each), where the tree's allocations cost more than the text. Object keys are the caller's to
// order: nlohmann's objects print their keys sorted.
#include <charconv>
#include <concepts>
#include <string>
#include <string_view>

namespace sluice::json_text {

// `s` as a JSON string, quotes included: printable ASCII is copied as it is, anything else (escapes, UTF-8,
// bytes that are not UTF-8 and come out as U+FFFD) goes through nlohmann's own escaping.
void append_string(std::string& out, std::string_view s);

// A number as dump writes a double: the shortest form its Grisu2 finds (which differs from std::to_chars' in the
// last digit of ~1.5% of floats), ".0" on whole numbers, exponents from 1e16 and below 1e-4; null when not
// finite.
void append_number(std::string& out, double v);

template <std::integral T>
void append_integer(std::string& out, T v) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  out.append(buf, end);
}

}  // namespace sluice::json_text
