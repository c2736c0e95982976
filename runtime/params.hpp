#pragma once
// A stage declares each parameter once: name, type, default, range or choices, one-line doc.
// The same declaration validates YAML, fills defaults and prints `sluiced inspect STAGE`.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace sluice {

enum class ParamType { integer, number, boolean, string, choice, numbers, strings };

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::string;
  std::string default_value;  // as YAML would spell it; empty + required=true means no default
  std::string doc;
  std::optional<double> min, max;      // integer, number, numbers (each element)
  std::vector<std::string> choices;    // choice
  int list_size = 0;                   // numbers: exact element count, -1: any count (strings: any count)
  bool required = false;

  std::string type_name() const;  // e.g. "int 1..4096", "one of bars|noise", "3 numbers"
};

// A `numbers` list of any count holds at most this many.
constexpr std::size_t kMaxListNumbers = 65536;

using ParamValue = std::variant<std::int64_t, double, bool, std::string, std::vector<double>, std::vector<std::string>>;

// Validated parameter values of one stage: every declared name has a value (given or default).
class ParamValues {
 public:
  std::int64_t integer(const std::string& name) const;
  double number(const std::string& name) const;
  bool boolean(const std::string& name) const;
  const std::string& string(const std::string& name) const;  // string and choice
  const std::vector<double>& numbers(const std::string& name) const;
  const std::vector<std::string>& strings(const std::string& name) const;
  bool was_given(const std::string& name) const { return given_.count(name) != 0; }

  void set(const std::string& name, ParamValue v, bool given) {
    values_[name] = std::move(v);
    if (given) given_[name] = true;
  }
  const std::map<std::string, ParamValue>& all() const { return values_; }

 private:
  const ParamValue& at(const std::string& name) const;
  std::map<std::string, ParamValue> values_;
  std::map<std::string, bool> given_;
};

// Parses `text` as a value of `spec`; on failure returns nullopt and sets `error` to a one-line reason.
std::optional<ParamValue> parse_param(const ParamSpec& spec, const std::string& text, std::string& error);
// Checks a list value (a YAML sequence) for a `numbers` or `strings` parameter.
std::optional<ParamValue> parse_param_list(const ParamSpec& spec, const std::vector<std::string>& items,
                                           std::string& error);
std::string format_param(const ParamValue& v);

}  // namespace sluice
