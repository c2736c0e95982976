#include "daemon/protocol.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace sluice {
namespace {

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

// The kind and bounds alone: "a number in (0, 60]".
std::string kind_and_bounds(const Argument& argument) {
  switch (argument.kind) {
    case ArgumentKind::boolean:
      return "true or false";
    case ArgumentKind::string:
      return "a non-empty string";
    case ArgumentKind::number:
      break;
  }
  const bool low = std::isfinite(argument.min), high = std::isfinite(argument.max);
  if (low && high)
    return "a number in " + std::string(argument.min_exclusive ? "(" : "[") + number_text(argument.min) + ", " +
           number_text(argument.max) + "]";
  if (low) return "a number " + std::string(argument.min_exclusive ? "> " : ">= ") + number_text(argument.min);
  if (high) return "a number <= " + number_text(argument.max);
  return "a finite number";
}

}  // namespace

const RequestSpec* find_request(std::string_view name) {
  for (const auto& spec : kRequests)
    if (spec.name == name) return &spec;
  return nullptr;
}

std::string request_list(bool read_only) {
  std::string out;
  for (const auto& spec : kRequests) {
    if (read_only && spec.mutating) continue;
    if (!out.empty()) out += ", ";
    out += spec.name;
  }
  return out;
}

std::string describe(const Argument& argument) {
  std::string out = kind_and_bounds(argument);
  if (!argument.help.empty()) out += " (" + std::string(argument.help) + ")";
  return out;
}

std::optional<std::string> check_argument(const Argument& argument, const nlohmann::json& value) {
  const std::string key = "'" + std::string(argument.key) + "'";
  switch (argument.kind) {
    case ArgumentKind::boolean:
      if (value.is_boolean()) return std::nullopt;
      return key + " must be " + describe(argument);
    case ArgumentKind::number:
      if (value.is_number() && within_bounds(argument, value.get<double>())) return std::nullopt;
      return key + " must be " + describe(argument);
    case ArgumentKind::string:
      break;
  }
  if (!value.is_string()) return key + " must be " + describe(argument);
  const auto& text = value.get_ref<const std::string&>();
  if (text.empty()) return key + " must not be empty";
  if (text.find('\0') != std::string::npos) return key + " must not contain NUL";
  if (text.size() > argument.max_bytes)
    return key + " is longer than " + std::to_string(argument.max_bytes) + " bytes";
  return std::nullopt;
}

bool within_bounds(const Argument& argument, double value) {
  return std::isfinite(value) && (argument.min_exclusive ? value > argument.min : value >= argument.min) &&
         value <= argument.max;
}

RequestBuilder& RequestBuilder::set(const Argument& argument, std::string_view value) {
  body_[std::string(argument.key)] = std::string(value);
  return *this;
}

RequestBuilder& RequestBuilder::set(const Argument& argument, bool value) {
  body_[std::string(argument.key)] = value;
  return *this;
}

RequestBuilder& RequestBuilder::set(const Argument& argument, double value) {
  // 25, not 25.0: whole numbers that an int64 holds exactly go out as integers.
  if (value == std::floor(value) && std::fabs(value) < 1e15)
    body_[std::string(argument.key)] = static_cast<std::int64_t>(value);
  else
    body_[std::string(argument.key)] = value;
  return *this;
}

}  // namespace sluice
