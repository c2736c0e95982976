#pragma once
// A stage's parameters as the config layer fills them, from name -> text: the given ones parsed, the others at
// their default (for tests that build a stage from its StageInfo without a pipeline file).
#include <map>
#include <stdexcept>
#include <string>

#include "runtime/stage.hpp"

namespace sluice::test {

inline ParamValues params_of(const StageInfo& info, const std::map<std::string, std::string>& given) {
  ParamValues values;
  for (const auto& spec : info.params) {
    std::string error;
    if (auto it = given.find(spec.name); it != given.end()) {
      auto v = parse_param(spec, it->second, error);
      if (!v) throw std::runtime_error(spec.name + ": " + error);
      values.set(spec.name, *v, true);
    } else if (!spec.default_value.empty()) {
      values.set(spec.name, *parse_param(spec, spec.default_value, error), false);
    } else {
      values.set(spec.name, std::string(), false);
    }
  }
  return values;
}

}  // namespace sluice::test
