// libFuzzer harness: the /proc parsers behind the process_* metrics (daemon/process_stats) on arbitrary text.
// Checked: nothing throws or crashes, and a parsed stat line's name is the text between its first '(' and
// its last ')'.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "daemon/process_stats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (const auto st = sluice::parse_proc_stat(text)) {
    const auto open = text.find('('), close = text.rfind(')');
    if (open == std::string_view::npos || close == std::string_view::npos || st->comm != text.substr(open + 1, close - open - 1))
      __builtin_trap();
  }
  (void)sluice::parse_max_open_files(text);
  (void)sluice::parse_boot_time(text);
  return 0;
}
