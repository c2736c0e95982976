// The job ledger reader (runtime/job_ledger.hpp) on arbitrary bytes as a ledger file's text: it either
// returns the records (and where a torn last line starts) or throws std::runtime_error naming the line.
// Anything else (a crash, another exception, a torn offset past the end) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "runtime/job_ledger.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto parsed = sluice::JobLedger::parse(text, "fuzz.ledger");
    if (parsed.torn_at && *parsed.torn_at > size) std::abort();
    if (parsed.entries.size() > parsed.records) std::abort();
    for (const auto& [input, entry] : parsed.entries)
      if (input.empty() || parsed.interrupted.count(input)) std::abort();  // finished or interrupted, not both
    for (const auto& input : parsed.interrupted)
      if (input.empty()) std::abort();
  } catch (const std::runtime_error&) {
    // a clear refusal is the expected answer to garbage
  }
  return 0;
}
