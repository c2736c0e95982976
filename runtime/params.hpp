#pragma once
// A stage declares each parameter once: name, type, default, range or choices, one-line doc.
// The same declaration validates YAML, fills defaults and prints `sluiced inspect STAGE`.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
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

// One spelling of a choice parameter and the value it stands for. A stage declares the table once, next to its
// ParamSpec: the spec's choices come from it (choice_names) and ParamValues::choice maps the validated spelling
// back, so the choices users see and the values the code acts on cannot drift apart.
template <class E>
struct Choice {
  std::string_view name;
  E value;
};

template <class E, std::size_t N>
std::vector<std::string> choice_names(const Choice<E> (&table)[N]) {
  std::vector<std::string> names;
  for (const auto& c : table) names.emplace_back(c.name);
  return names;
}

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
  // A choice parameter's value, mapped by the table its ParamSpec's choices were made from (choice_names).
  template <class E, std::size_t N>
  E choice(const std::string& name, const Choice<E> (&table)[N]) const {
    const std::string& spelled = string(name);
    for (const auto& c : table)
      if (c.name == spelled) return c.value;
    throw std::logic_error("parameter '" + name + "' holds '" + spelled + "', which its choice table lacks");
  }
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
