#pragma once
// What every part of sluicectl shares about the command line: its exit codes, the way a usage error is
// reported, and reading a number from a word.
#include <optional>
#include <string>

namespace sluice::ctl {

constexpr int kExitOk = 0;
constexpr int kExitRefused = 1;  // the daemon replied ok:false
constexpr int kExitUsage = 2;
constexpr int kExitConnect = 3;
constexpr int kExitTimeout = 4;  // no reply in time, or a reply that is not a protocol reply
constexpr int kExitOutput = 5;   // trace: the output file cannot be written

// Prints "sluicectl: MESSAGE" and where to find the usage on stderr; returns kExitUsage.
int usage_error(const std::string& message);

// The build's version ("unknown" in a tree without the generated version.hpp).
const char* version();

// `word` as a finite number (strtod's syntax, the whole word), or nullopt.
std::optional<double> parse_number(const std::string& word);

}  // namespace sluice::ctl
