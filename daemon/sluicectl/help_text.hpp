#pragma once
// sluicectl's help texts: the head and tail of `sluicectl --help` (commands.cpp lists the commands between
// them) and each command's own help (`sluicectl help COMMAND`, `sluicectl COMMAND --help`).
#include <string>

namespace sluice::ctl {

extern const char* const kUsageHead;
// Options and exit status: the part of --help after the commands.
std::string usage_tail();

extern const char* const kStatusHelp;
extern const char* const kWatchHelp;
extern const char* const kSourcesHelp;
extern const char* const kAddSourceHelp;
extern const char* const kRemoveSourceHelp;
extern const char* const kPauseHelp;
extern const char* const kResumeHelp;
extern const char* const kReloadHelp;
extern const char* const kStopHelp;
extern const char* const kTraceHelp;
extern const char* const kVersionHelp;
extern const char* const kHelpHelp;

}  // namespace sluice::ctl
