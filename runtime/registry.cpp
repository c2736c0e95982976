#include <stdexcept>

#include "runtime/stage.hpp"
#include "stages/builtin.hpp"

namespace sluice {

namespace {
StageRegistry& builtin_registry() {
  static StageRegistry registry = [] {
    StageRegistry r;
    register_builtin_stages(r);
    return r;
  }();
  return registry;
}
}  // namespace

const StageRegistry& StageRegistry::builtin() { return builtin_registry(); }

void StageRegistry::add_builtin(StageInfo info) {
  if (!builtin_registry().find(info.kind)) builtin_registry().add(std::move(info));
}

void StageRegistry::add(StageInfo info) {
  if (find(info.kind)) throw std::logic_error("stage kind '" + info.kind + "' is registered twice");
  stages_.push_back(std::move(info));
}

const StageInfo* StageRegistry::find(const std::string& kind) const {
  for (const auto& s : stages_)
    if (s.kind == kind) return &s;
  return nullptr;
}

std::string StageRegistry::kinds() const {
  std::string s;
  for (const auto& st : stages_) s += (s.empty() ? "" : ", ") + st.kind;
  return s;
}

std::optional<StageOutput> stage_output(const std::string& kind, const ParamValues& params) {
  const StageInfo* info = StageRegistry::builtin().find(kind);
  return info && info->output ? info->output(params) : std::nullopt;
}

std::string describe_stage(const StageInfo& info) {
  static constexpr const char* kRoles[] = {"source", "transform", "sink"};
  std::string out = info.kind + " (" + kRoles[static_cast<int>(info.role)] + "): " + info.doc + "\n";
  if (info.params.empty()) return out + "  (no parameters)\n";
  std::size_t width = 0;
  for (const auto& p : info.params) width = std::max(width, p.name.size());
  for (const auto& p : info.params) {
    std::string def = p.required ? "required" : "default " + (p.default_value.empty() ? "\"\"" : p.default_value);
    out += "  " + p.name + std::string(width - p.name.size() + 2, ' ') + p.doc + "\n" +
           std::string(width + 4, ' ') + p.type_name() + "; " + def + "\n";
  }
  return out;
}

}  // namespace sluice
