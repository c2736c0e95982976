#include "runtime/params.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace sluice {
namespace {
std::string fmt_number(double d) {
  if (std::floor(d) == d && std::fabs(d) < 1e15) return std::to_string(static_cast<long long>(d));
  std::string s = std::to_string(d);
  while (!s.empty() && s.back() == '0') s.pop_back();
  return s;
}

bool in_range(const ParamSpec& spec, double v, std::string& error) {
  if ((spec.min && v < *spec.min) || (spec.max && v > *spec.max)) {
    error = fmt_number(v) + " is out of range (" + spec.type_name() + ")";
    return false;
  }
  return true;
}

std::optional<double> to_double(const std::string& text) {
  double d = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(d)) return std::nullopt;
  return d;
}
}  // namespace

std::string ParamSpec::type_name() const {
  auto range = [&] {
    if (!min && !max) return std::string();
    return " " + (min ? fmt_number(*min) : std::string()) + ".." + (max ? fmt_number(*max) : std::string());
  };
  switch (type) {
    case ParamType::integer: return "int" + range();
    case ParamType::number: return "number" + range();
    case ParamType::boolean: return "bool";
    case ParamType::string: return "string";
    case ParamType::numbers:
      return (list_size < 0 ? std::string("list of numbers") : std::to_string(list_size) + " numbers") + range();
    case ParamType::strings: return "list of strings";
    case ParamType::choice: {
      std::string s = "one of ";
      for (std::size_t i = 0; i < choices.size(); ++i) s += (i ? "|" : "") + choices[i];
      return s;
    }
  }
  return "?";
}

std::optional<ParamValue> parse_param(const ParamSpec& spec, const std::string& text, std::string& error) {
  switch (spec.type) {
    case ParamType::integer: {
      std::int64_t v = 0;
      auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || ptr != text.data() + text.size()) {
        error = "expected an integer, got '" + text + "'";
        return std::nullopt;
      }
      if (!in_range(spec, static_cast<double>(v), error)) return std::nullopt;
      return v;
    }
    case ParamType::number: {
      auto d = to_double(text);
      if (!d) {
        error = "expected a number, got '" + text + "'";
        return std::nullopt;
      }
      if (!in_range(spec, *d, error)) return std::nullopt;
      return *d;
    }
    case ParamType::boolean:
      if (text == "true" || text == "yes" || text == "on") return true;
      if (text == "false" || text == "no" || text == "off") return false;
      error = "expected true or false, got '" + text + "'";
      return std::nullopt;
    case ParamType::string: return text;
    case ParamType::choice:
      for (const auto& c : spec.choices)
        if (c == text) return text;
      error = "'" + text + "' is not " + spec.type_name();
      return std::nullopt;
    case ParamType::numbers: error = "expected a list of " + (spec.list_size < 0 ? std::string("numbers") : std::to_string(spec.list_size) + " numbers");
      return std::nullopt;
    case ParamType::strings:  // one string stands for a list of one
      if (text.empty()) {
        error = "expected a string or a list of strings, e.g. [alice, bob]";
        return std::nullopt;
      }
      return std::vector<std::string>{text};
  }
  return std::nullopt;
}

std::optional<ParamValue> parse_param_list(const ParamSpec& spec, const std::vector<std::string>& items,
                                           std::string& error) {
  if (spec.type == ParamType::strings) return items;
  if (spec.type != ParamType::numbers) {
    error = "expected " + spec.type_name() + ", got a list";
    return std::nullopt;
  }
  if (spec.list_size >= 0 && static_cast<int>(items.size()) != spec.list_size) {
    error = "expected " + std::to_string(spec.list_size) + " numbers, got " + std::to_string(items.size());
    return std::nullopt;
  }
  if (items.size() > kMaxListNumbers) {
    error = "at most " + std::to_string(kMaxListNumbers) + " numbers, got " + std::to_string(items.size());
    return std::nullopt;
  }
  std::vector<double> out;
  for (const auto& item : items) {
    auto d = to_double(item);
    if (!d) {
      error = "expected a number, got '" + item + "'";
      return std::nullopt;
    }
    if (!in_range(spec, *d, error)) return std::nullopt;
    out.push_back(*d);
  }
  return out;
}

std::string format_param(const ParamValue& v) {
  struct Visitor {
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return fmt_number(d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const std::vector<double>& l) const {
      std::string s = "[";
      for (std::size_t i = 0; i < l.size(); ++i) s += (i ? ", " : "") + fmt_number(l[i]);
      return s + "]";
    }
    std::string operator()(const std::vector<std::string>& l) const {
      std::string s = "[";
      for (std::size_t i = 0; i < l.size(); ++i) s += (i ? ", " : "") + l[i];
      return s + "]";
    }
  };
  return std::visit(Visitor{}, v);
}

const ParamValue& ParamValues::at(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw std::logic_error("parameter '" + name + "' is not declared");
  return it->second;
}
std::int64_t ParamValues::integer(const std::string& name) const { return std::get<std::int64_t>(at(name)); }
double ParamValues::number(const std::string& name) const { return std::get<double>(at(name)); }
bool ParamValues::boolean(const std::string& name) const { return std::get<bool>(at(name)); }
const std::string& ParamValues::string(const std::string& name) const { return std::get<std::string>(at(name)); }
const std::vector<double>& ParamValues::numbers(const std::string& name) const {
  return std::get<std::vector<double>>(at(name));
}
const std::vector<std::string>& ParamValues::strings(const std::string& name) const {
  return std::get<std::vector<std::string>>(at(name));
}

}  // namespace sluice
