#pragma once
// How sluiced's log lines look, on a terminal and under systemd.
//
// A message holds text that peers, files and libraries chose (an input's file name, a source's URI, FFmpeg's
// words). Written raw, a newline in it would start a line of its own, which journald takes as a new record
// with the priority its first bytes claim ("<0>"), and an ESC sequence would drive the terminal that shows the
// log. So every message is written through printable(): one line, controls as visible escapes.
#include <memory>

#include <spdlog/formatter.h>

namespace sluice {

// The formatter of sluiced's log: `journal` (stderr is a journal stream) gives "<N>message" lines, N the syslog
// priority of the level; otherwise "TIME LEVEL message".
std::unique_ptr<spdlog::formatter> make_log_formatter(bool journal);

// The default logger: stderr, colored levels on a terminal; journal lines when JOURNAL_STREAM is set.
void setup_logging();

}  // namespace sluice
