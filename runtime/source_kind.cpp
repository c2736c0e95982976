#include "runtime/source_kind.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <tuple>

namespace sluice {
namespace {

// What SLUICE_REGISTER_SOURCE_KIND collected; turned into the table on first use, when every static object exists.
std::vector<SourceKind (*)()>& registered_kinds() {
  static std::vector<SourceKind (*)()> declares;
  return declares;
}

std::vector<SourceKind> make_table() {
  std::vector<SourceKind> kinds;
  std::set<std::string> names;
  for (const auto declare : registered_kinds()) {
    SourceKind k = declare();
    if (!k.claims) throw std::logic_error("source kind '" + k.name + "' claims no URI");
    if (!names.insert(k.name).second) throw std::logic_error("source kind '" + k.name + "' is registered twice");
    kinds.push_back(std::move(k));
  }
  // Static objects register in link order: the table keeps an order of its own.
  std::sort(kinds.begin(), kinds.end(), [](const SourceKind& a, const SourceKind& b) {
    return std::tie(a.precedence, a.name) < std::tie(b.precedence, b.name);
  });
  return kinds;
}

}  // namespace

SourceKindRegistrar::SourceKindRegistrar(SourceKind (*declare)()) { registered_kinds().push_back(declare); }

const std::vector<SourceKind>& source_kinds() {
  static const std::vector<SourceKind> table = make_table();
  return table;
}

const SourceKind& source_kind_of(std::string_view uri) {
  const auto& kinds = source_kinds();
  for (const SourceKind& k : kinds)
    if (k.claims(uri)) return k;
  // The file kind claims everything; a program that linked no kinds at all is built wrong.
  throw std::logic_error("no source kind claims '" + std::string(uri.substr(0, 64)) +
                         "' (this program links no `file` source kind)");
}

ExpandedSource SourceKind::inputs_of(const std::string& uri) const {
  if (expand) return expand(uri);
  ExpandedSource one;
  one.kind = reads_as;
  one.inputs.emplace_back(uri, reads_as);
  return one;
}

InputKind classify_uri(std::string_view uri) { return source_kind_of(uri).reads_as; }

ExpandedSource expand_source(const std::string& uri) { return source_kind_of(uri).inputs_of(uri); }

std::string default_source_name(const std::string& uri) {
  const SourceKind& kind = source_kind_of(uri);
  const std::string name = sanitize_source_name(kind.default_name ? kind.default_name(uri) : kind.name);
  return name.empty() ? "source" : name;
}

bool carries_over_reload(const std::string& uri, const ReaderOptions& reader) {
  const SourceKind& kind = source_kind_of(uri);
  return kind.live() || (kind.endless_without_frame_count && reader.frames == 0);
}

}  // namespace sluice
