#pragma once
// sluicectl's rendering: the daemon's replies as text for a person (tables for status and sources, one line
// for the other commands), as indented JSON, and fitted to a terminal's width for watch. A reply's fields may
// be missing or of the wrong type (an older or newer daemon): they are shown as '-', never an error.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "daemon/sluicectl/transport.hpp"

namespace sluice::ctl {

using json = nlohmann::ordered_json;  // keeps the daemon's key order in status --json

std::string format_status(const json& reply);   // sluicectl status
std::string format_sources(const json& reply);  // sluicectl sources
// Indented, invalid UTF-8 replaced, without a final newline (--json).
std::string format_json(const json& reply);

// One line (with its newline) for the commands that change things, from their replies.
std::string format_state(std::string_view command, const json& reply);  // pause, resume, stop: "pause: state paused"
std::string format_reload(const json& reply);
std::string format_version(const json& reply);  // the daemon's line of sluicectl version
std::string format_source_added(const json& reply);
std::string format_source_removed(const std::string& which);

// trace: the reply's trace as the output file's content (one line of compact JSON) and the number of its
// events; `problem` says what is wrong with a reply that has no trace (then the rest is empty).
struct TraceText {
  std::string content;
  std::size_t events = 0;
  std::string problem;
};
TraceText trace_text(const json& reply);
std::string format_trace_summary(std::size_t events, double seconds, const std::string& file);

// One refresh of watch: a head line with the time, then the status (or why there is none), every line
// fitted to the terminal; on a terminal the screen is cleared first, elsewhere refreshes are separated by
// a blank line (`first`: none before the first).
std::string watch_screen(const std::string& address, double interval_s, const Outcome& outcome, bool tty, bool first);

// Every line of `text` fitted to `width` columns (0: no limit): control characters become spaces and a longer
// line is cut at a code point and ends in an ellipsis, so a long reason cannot wrap and break the tables.
std::string fit_screen(const std::string& text, std::size_t width);

}  // namespace sluice::ctl
