#pragma once
// The console's page, built into the binary from daemon/console/ (cmake/embed_console.cmake generates the table).
#include <string_view>

namespace sluice {

struct ConsoleAsset {
  std::string_view name;          // file name, e.g. "console.js"
  std::string_view content_type;
  std::string_view data;
};

// nullptr when there is no such file.
const ConsoleAsset* find_console_asset(std::string_view name);

}  // namespace sluice
