#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "runtime/stage.hpp"
#include "runtime/stage_registrar.hpp"

namespace sluice {

namespace {
// What SLUICE_REGISTER_STAGE collected, called on the first builtin(): by then every static object exists,
// whatever order they were made in.
std::vector<StageInfo (*)()>& registered_stages() {
  static std::vector<StageInfo (*)()> declares;
  return declares;
}

StageRegistry& builtin_registry() {
  static StageRegistry registry = [] {
    StageRegistry r;
    for (const auto declare : registered_stages()) r.add(declare());
    return r;
  }();
  return registry;
}
}  // namespace

StageRegistrar::StageRegistrar(StageInfo (*declare)()) { registered_stages().push_back(declare); }

const StageRegistry& StageRegistry::builtin() { return builtin_registry(); }

void StageRegistry::add(StageInfo info) {
  if (find(info.kind)) throw std::logic_error("stage kind '" + info.kind + "' is registered twice");
  // Static objects register in link order, so the list keeps an order of its own (all()).
  const auto after = std::find_if(stages_.begin(), stages_.end(), [&](const StageInfo& s) {
    return std::tie(info.role, info.kind) < std::tie(s.role, s.kind);
  });
  stages_.insert(after, std::move(info));
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
