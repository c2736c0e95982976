#include "daemon/sluicectl/cli.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#if __has_include("version.hpp")
#include "version.hpp"
#endif
#ifndef SLUICE_VERSION
#define SLUICE_VERSION "unknown"
#endif

namespace sluice::ctl {

const char* version() { return SLUICE_VERSION; }

int usage_error(const std::string& message) {
  std::fprintf(stderr, "sluicectl: %s\n(sluicectl --help for usage)\n", message.c_str());
  return kExitUsage;
}

std::optional<double> parse_number(const std::string& word) {
  if (word.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(word.c_str(), &end);
  if (errno != 0 || end != word.c_str() + word.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace sluice::ctl
