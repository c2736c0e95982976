#include "daemon/sluicectl/render.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <vector>

#include "daemon/sluicectl/cli.hpp"
#include "runtime/printable.hpp"

namespace sluice::ctl {
namespace {

// Formatting a status reply. Every field may be missing or of the wrong type: print '-'. Every string from the
// reply goes through printable() (a name or reason is any bytes a peer or a file system chose).

const json* field(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string text(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return "-";
  if (v->is_string()) return printable(v->get_ref<const std::string&>());
  if (v->is_boolean()) return v->get<bool>() ? "yes" : "no";
  if (v->is_number()) return v->dump();
  return "-";
}

std::optional<double> number(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v || !v->is_number()) return std::nullopt;
  double d = v->get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

std::string fmt(const json& j, const char* key, const char* format, double scale = 1.0) {
  auto d = number(j, key);
  if (!d) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, *d * scale);
  return buf;
}

std::string count(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return "-";
  if (v->is_number_unsigned()) return std::to_string(v->get<std::uint64_t>());
  if (v->is_number_integer()) return std::to_string(v->get<std::int64_t>());
  if (v->is_number_float()) return fmt(j, key, "%.0f");
  return "-";
}

std::string format_uptime(const json& j) {
  auto s = number(j, "uptime_s");
  if (!s || *s < 0) return "-";
  char buf[64];
  if (*s < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", *s);
    return buf;
  }
  auto total = static_cast<unsigned long long>(*s);
  unsigned long long d = total / 86400, h = total / 3600 % 24, m = total / 60 % 60, sec = total % 60;
  if (d)
    std::snprintf(buf, sizeof buf, "%llud %02lluh %02llum %02llus", d, h, m, sec);
  else if (h)
    std::snprintf(buf, sizeof buf, "%lluh %02llum %02llus", h, m, sec);
  else
    std::snprintf(buf, sizeof buf, "%llum %02llus", m, sec);
  return buf;
}

std::string ledger_line(const json& f) {
  std::string in_flight = count(f, "in_flight");
  if (in_flight == "-") {  // derive it when the daemon left it out
    auto p = number(f, "produced"), d = number(f, "delivered"), x = number(f, "dropped"), e = number(f, "failed");
    if (p && d && x && e && *p >= *d + *x + *e) in_flight = std::to_string(static_cast<long long>(*p - *d - *x - *e));
  }
  return "produced " + count(f, "produced") + " = delivered " + count(f, "delivered") + " + dropped " +
         count(f, "dropped") + " + failed " + count(f, "failed") + " + in flight " + in_flight;
}

void append_ledger_details(std::string& out, const json& f) {
  if (auto late = number(f, "late"); late && *late > 0) {
    out += "  late " + count(f, "late") + " (delivered past their latency budget)";
    if (const json* by = field(f, "late_by_source"); by && by->is_object() && !by->empty()) {
      std::string sources;
      for (const auto& [name, n] : by->items())
        sources += (sources.empty() ? "" : ", ") + printable(name) + " " + (n.is_number() ? n.dump() : std::string("-"));
      out += ": " + sources;
    }
    out += "\n";
  }
  if (const json* reasons = field(f, "drop_reasons"); reasons && reasons->is_object()) {
    for (const auto& [reason, n] : reasons->items())
      out += "  dropped " + (n.is_number() ? n.dump() : std::string("-")) + ": " + printable(reason) + "\n";
  }
  if (const json* errors = field(f, "errors"); errors && errors->is_array()) {
    std::size_t shown = 0;
    for (const auto& e : *errors) {
      if (shown == 8) {
        out += "  ... " + std::to_string(errors->size() - shown) + " more errors (status --json for all)\n";
        break;
      }
      out += "  error: " + printable(e.is_string() ? e.get<std::string>() : e.dump()) + "\n";
      ++shown;
    }
  }
}

// The earlier generations' ledger: docs/protocol.md puts their `totals` under `frames_before_reload`; accept it
// at the top level or inside `frames`, with or without the `totals` wrapper.
const json* earlier_ledger(const json& r) {
  const json* before = field(r, "frames_before_reload");
  if (!before) {
    if (const json* f = field(r, "frames")) before = field(*f, "frames_before_reload");
  }
  if (!before || !before->is_object()) return nullptr;
  if (const json* t = field(*before, "totals"); t && t->is_object()) return t;
  return before;
}

// ---------------------------------------------------------------------------------------------------------
// Formatting sources and inputs: the `sources` reply, and the same two arrays in a `status` reply.

// 1.8 s, 42 s, 3m 07s, 2h 05m, 1d 03h; '-' for a missing or negative value (-1: not known).
std::string format_duration(std::optional<double> s) {
  if (!s || *s < 0) return "-";
  char buf[64];
  if (*s < 9.95) {
    std::snprintf(buf, sizeof buf, "%.1f s", *s);
    return buf;
  }
  if (*s < 59.5) {
    std::snprintf(buf, sizeof buf, "%.0f s", *s);
    return buf;
  }
  const auto t = static_cast<unsigned long long>(*s + 0.5);
  if (t < 3600)
    std::snprintf(buf, sizeof buf, "%llum %02llus", t / 60, t % 60);
  else if (t < 86400)
    std::snprintf(buf, sizeof buf, "%lluh %02llum", t / 3600, t / 60 % 60);
  else
    std::snprintf(buf, sizeof buf, "%llud %02lluh", t / 86400, t / 3600 % 24);
  return buf;
}

// At most `max` bytes, cut at a code point (the text is printable(): valid UTF-8).
std::string shorten(std::string s, std::size_t max) {
  if (s.size() <= max) return s;
  std::size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

// The array under `key`, or nullptr when the reply has none (an older daemon).
const json* array_field(const json& j, const char* key) {
  const json* v = field(j, key);
  return v && v->is_array() ? v : nullptr;
}

std::string source_label(const json& s) {
  std::string name = text(s, "name");
  if (name == "-") name = text(s, "stage");  // daemons before run-time sources named the decode stage
  return shorten(name, 32);
}

// Live sources connect and reconnect; their `inputs` count connections, not the files of a job.
bool is_live_kind(const std::string& kind) { return kind == "camera" || kind == "stream" || kind == "testsrc"; }

// What follows a source's columns: why it is stalled, backing off or failed; a job's input counts.
std::string source_notes(const json& s) {
  std::vector<std::string> notes;
  const std::string state = text(s, "state");
  if (state == "stalled" || state == "backoff" || state == "failed") {
    std::string note;
    if (const json* reason = field(s, "reason"); reason && reason->is_string()) note = printable(reason->get<std::string>());
    std::string when;
    if (state == "stalled" && number(s, "since_last_frame_s").value_or(-1) >= 0)
      when = "last frame " + format_duration(number(s, "since_last_frame_s")) + " ago";
    if (state == "backoff" && number(s, "next_attempt_in_s").value_or(-1) >= 0)
      when = "next attempt in " + format_duration(number(s, "next_attempt_in_s"));
    if (note.empty())
      note = when;
    else if (!when.empty())
      note += " (" + when + ")";
    if (!note.empty()) notes.push_back(state + ": " + note);  // the state column says it already otherwise
  }
  if (const json* in = field(s, "inputs"); in && in->is_object() && !is_live_kind(text(s, "kind"))) {
    const auto total = number(*in, "total"), failed = number(*in, "failed"), skipped = number(*in, "skipped");
    if (total.value_or(0) > 1 || failed.value_or(0) > 0 || skipped.value_or(0) > 0) {
      std::string note = "inputs " + count(*in, "done") + "/" + count(*in, "total") + " done, " +
                         count(*in, "failed") + " failed";
      if (skipped.value_or(0) > 0) note += ", " + count(*in, "skipped") + " skipped";
      notes.push_back(note);
    }
  }
  std::string out;
  for (const auto& n : notes) out += (out.empty() ? "" : "; ") + n;
  return out;
}

// One row per source; with `detailed` (the sources command) each row is followed by the source's URI and
// its bad inputs.
void append_sources_table(std::string& out, const json& sources, bool detailed) {
  int name_w = 6, kind_w = 4;
  for (const auto& s : sources) {
    name_w = std::max(name_w, static_cast<int>(source_label(s).size()));
    kind_w = std::max(kind_w, static_cast<int>(shorten(text(s, "kind"), 16).size()));
  }
  char line[512];
  std::snprintf(line, sizeof line, "%4s  %-*s %-*s %-10s %10s %7s %8s %7s %10s\n", "id", name_w, "source", kind_w,
                "kind", "state", "frames", "fps", "dropped", "errors", "reconnects");
  out += line;
  for (const auto& s : sources) {
    std::snprintf(line, sizeof line, "%4s  %-*s %-*s %-10s %10s %7s %8s %7s %10s", count(s, "id").c_str(), name_w,
                  source_label(s).c_str(), kind_w, shorten(text(s, "kind"), 16).c_str(),
                  shorten(text(s, "state"), 10).c_str(), count(s, "frames").c_str(), fmt(s, "fps", "%.1f").c_str(),
                  count(s, "dropped").c_str(), count(s, "errors").c_str(), count(s, "reconnects").c_str());
    out += line;
    if (std::string notes = source_notes(s); !notes.empty()) out += "  " + notes;
    out += "\n";
    if (!detailed) continue;
    if (const json* uri = field(s, "uri"); uri && uri->is_string()) out += "        uri " + printable(uri->get<std::string>()) + "\n";
    if (const std::string decoder = text(s, "decoder"); decoder != "-" && !decoder.empty()) out += "        decoder " + decoder + "\n";
    if (const json* bad = array_field(s, "bad_inputs")) {
      std::size_t shown = 0;
      for (const auto& b : *bad) {
        if (shown == 8) {
          out += "        ... " + std::to_string(bad->size() - shown) + " more bad inputs (sources --json for all)\n";
          break;
        }
        out += "        bad input: " + printable(b.is_string() ? b.get<std::string>() : b.dump()) + "\n";
        ++shown;
      }
    }
  }
}

bool input_in_progress(const json& in) {
  const std::string state = text(in, "state");
  return state == "decoding" || state == "finishing";
}

// frames done/total: "37/120", "37/-" while the total is not known.
std::string input_frames(const json& in) {
  std::string done = count(in, "frames_done");
  if (done == "-") {  // derive it when the daemon left it out
    auto d = number(in, "delivered"), x = number(in, "dropped"), f = number(in, "failed");
    if (d && x && f) done = std::to_string(static_cast<long long>(*d + *x + *f));
  }
  return done + "/" + count(in, "frames_total");
}

std::string input_percent(const json& in) {
  auto total = number(in, "frames_total");
  auto done = number(in, "frames_done");
  if (!done) {
    auto d = number(in, "delivered"), x = number(in, "dropped"), f = number(in, "failed");
    if (d && x && f) done = *d + *x + *f;
  }
  if (!total || *total <= 0 || !done) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", std::floor(std::clamp(*done / *total, 0.0, 1.0) * 100.0));
  return buf;
}

// The inputs table of the sources command: the inputs in progress first, then the recently finished ones.
void append_inputs_table(std::string& out, const json& inputs) {
  std::vector<const json*> rows;
  for (const auto& in : inputs) rows.push_back(&in);
  std::stable_partition(rows.begin(), rows.end(), [](const json* in) { return input_in_progress(*in); });
  int source_w = 6;
  for (const json* in : rows) source_w = std::max(source_w, static_cast<int>(shorten(text(*in, "source"), 32).size()));
  char line[512];
  std::snprintf(line, sizeof line, "%5s  %-*s %-10s %15s %5s %7s %8s  %s\n", "input", source_w, "source", "state",
                "frames", "%", "fps", "ETA", "uri");
  out += line;
  for (const json* in : rows) {
    std::snprintf(line, sizeof line, "%5s  %-*s %-10s %15s %5s %7s %8s  ", count(*in, "id").c_str(), source_w,
                  shorten(text(*in, "source"), 32).c_str(), shorten(text(*in, "state"), 10).c_str(),
                  input_frames(*in).c_str(), input_percent(*in).c_str(), fmt(*in, "fps", "%.1f").c_str(),
                  input_in_progress(*in) ? format_duration(number(*in, "eta_s")).c_str() : "-");
    out += line + text(*in, "uri");
    if (const json* e = field(*in, "error"); e && e->is_string() && !e->get<std::string>().empty())
      out += " (" + printable(e->get<std::string>()) + ")";
    out += "\n";
  }
}

// status: the inputs of the sources that read files summed up, and a line per input in progress (at most 4).
void append_progress(std::string& out, const json* sources, const json* inputs) {
  double total = 0, done = 0, failed = 0, skipped = 0;
  bool counted = false;
  if (sources)
    for (const auto& s : *sources) {
      const json* in = field(s, "inputs");
      if (!in || !in->is_object() || is_live_kind(text(s, "kind"))) continue;
      auto t = number(*in, "total"), d = number(*in, "done"), f = number(*in, "failed"), k = number(*in, "skipped");
      if (!t) continue;
      counted = true;
      total += *t;
      done += d.value_or(0);
      failed += f.value_or(0);
      skipped += k.value_or(0);
    }
  std::vector<const json*> running;  // a camera or stream connection has no end to be near: not listed
  if (inputs)
    for (const auto& in : *inputs)
      if (input_in_progress(in) && (!is_live_kind(text(in, "kind")) || number(in, "frames_total")))
        running.push_back(&in);
  if (!(counted && total > 0) && running.empty()) return;
  auto n = [](double v) { return std::to_string(static_cast<long long>(v)); };
  std::string line = "inputs: ";
  if (counted && total > 0) {
    line += n(done) + "/" + n(total) + " done, " + n(failed) + " failed";
    if (skipped > 0) line += ", " + n(skipped) + " skipped";
    line += ", ";
  }
  out += line + std::to_string(running.size()) + " in progress\n";
  std::size_t shown = 0;
  for (const json* in : running) {
    if (shown == 4) {
      out += "  ... " + std::to_string(running.size() - shown) + " more (sluicectl sources)\n";
      break;
    }
    std::string uri = text(*in, "uri");
    if (uri.size() > 60) uri = "..." + uri.substr(uri.size() - 57);
    const std::string pct = input_percent(*in);
    out += "  " + uri + "  " + input_frames(*in) + (pct == "-" ? "" : " (" + pct + ")") + "  " +
           fmt(*in, "fps", "%.1f") + " fps  ETA " + format_duration(number(*in, "eta_s")) + "\n";
    ++shown;
  }
}

// The sources command's output.
}  // namespace

std::string format_json(const json& reply) { return reply.dump(2, ' ', false, json::error_handler_t::replace); }

std::string format_state(std::string_view command, const json& reply) {
  return std::string(command) + ": state " + text(reply, "state") + "\n";
}

std::string format_reload(const json& reply) {
  std::string out = "reload: config " + text(reply, "config");
  if (field(reply, "generation")) out += " (generation " + count(reply, "generation") + ")";
  if (field(reply, "state")) out += ", state " + text(reply, "state");
  return out + "\n";
}

std::string format_version(const json& reply) {
  std::string cuda = "-";
  if (const json* c = field(reply, "cuda"); c && c->is_boolean()) cuda = c->get<bool>() ? "yes" : "no";
  return "sluiced " + text(reply, "version") + " (cuda: " + cuda + ")\n";
}

std::string format_source_added(const json& reply) {
  return "added source " + count(reply, "id") + " '" + text(reply, "name") + "'\n";
}

std::string format_source_removed(const std::string& which) { return "removed source " + printable(which) + "\n"; }

std::string format_sources(const json& r) {
  std::string out;
  const json* sources = array_field(r, "sources");
  if (!sources)
    out += "(no sources reported)\n";
  else if (sources->empty())
    out += "no sources\n";
  else
    append_sources_table(out, *sources, /*detailed=*/true);
  if (const json* inputs = array_field(r, "inputs"); inputs && !inputs->empty()) {
    out += "\n";
    append_inputs_table(out, *inputs);
  }
  return out;
}

std::string format_status(const json& r) {
  std::string out;
  char line[512];
  auto row = [&](std::string label, const std::string& value) {
    label.resize(12, ' ');
    out += label + value + "\n";
  };
  row("state", text(r, "state"));
  row("uptime", format_uptime(r));
  row("config", text(r, "config"));
  std::string pipeline = text(r, "pipeline");
  if (field(r, "generation")) pipeline += " (generation " + count(r, "generation") + ")";
  row("pipeline", pipeline);
  row("device", text(r, "device") + ", execution " + text(r, "execution"));
  out += "\n";

  const json* stages = field(r, "stages");
  const bool have_stages = stages && stages->is_array() && !stages->empty();
  auto stage_label = [](const json& st) {
    std::string name = text(st, "name");
    const std::string kind = text(st, "kind");
    if (kind != "-" && kind != name) name += " (" + kind + ")";
    if (name.size() > 60) name = name.substr(0, 57) + "...";
    return name;
  };
  int name_w = 14;
  if (have_stages)
    for (const auto& st : *stages) name_w = std::max(name_w, static_cast<int>(stage_label(st).size()));
  std::snprintf(line, sizeof line, "%-*s %10s %8s %8s %8s %9s %9s %9s %5s %11s %8s %8s\n", name_w, "stage", "frames",
                "fps 1s", "fps 10s", "fps 60s", "host ms/b", "cpu ms/b", "gpu ms/b", "busy", "queue", "drops", "errors");
  out += line;
  if (!have_stages) {
    out += "  (no stages reported)\n";
  } else {
    for (const auto& st : *stages) {
      const std::string name = stage_label(st);
      const json* on_gpu = field(st, "on_gpu");
      const bool gpu_stage = !(on_gpu && on_gpu->is_boolean() && !on_gpu->get<bool>());
      const std::string gpu = gpu_stage ? fmt(st, "gpu_ms_per_batch", "%.3f") : "-";
      const std::string busy = gpu_stage ? fmt(st, "busy", "%.0f%%", 100.0) : "-";
      std::string queue = "-";
      if (auto cap = number(st, "queue_capacity"); cap && *cap > 0)
        queue = count(st, "queue_depth") + "/" + count(st, "queue_capacity");
      std::snprintf(line, sizeof line, "%-*s %10s %8s %8s %8s %9s %9s %9s %5s %11s %8s %8s\n", name_w, name.c_str(),
                    count(st, "frames").c_str(), fmt(st, "fps_1s", "%.1f").c_str(), fmt(st, "fps_10s", "%.1f").c_str(),
                    fmt(st, "fps_60s", "%.1f").c_str(), fmt(st, "host_ms_per_batch", "%.3f").c_str(),
                    fmt(st, "cpu_ms_per_batch", "%.3f").c_str(), gpu.c_str(),
                    busy.c_str(), queue.c_str(), count(st, "dropped").c_str(), count(st, "errors").c_str());
      out += line;
    }
  }
  out += "\n";

  // Sources and inputs (daemons before run-time sources send neither, or a list without ids: '-').
  const json* sources = array_field(r, "sources");
  const json* inputs = array_field(r, "inputs");
  if (sources) {
    if (sources->empty())
      out += "sources: none\n";
    else
      append_sources_table(out, *sources, /*detailed=*/false);
  }
  const std::size_t before_progress = out.size();
  append_progress(out, sources, inputs);
  if (sources || out.size() != before_progress) out += "\n";

  static const json kEmpty = json::object();
  const json* frames = field(r, "frames");
  const json& f = frames && frames->is_object() ? *frames : kEmpty;
  out += "frames: " + ledger_line(f) + "\n";
  append_ledger_details(out, f);
  const json* before = earlier_ledger(r);
  const auto earlier_produced = before ? number(*before, "produced") : std::nullopt;
  const auto generation = number(r, "generation");
  if (before && ((earlier_produced && *earlier_produced > 0) || (generation && *generation > 1))) {
    out += "earlier generations: " + ledger_line(*before) + "\n";
    append_ledger_details(out, *before);
  }
  const json* lat = field(r, "latency_ms");
  const json& l = lat && lat->is_object() ? *lat : kEmpty;
  auto ms = [&](const char* key) {
    std::string v = fmt(l, key, "%.2f");
    return v == "-" ? v : v + " ms";
  };
  out += "latency (capture to sink): p50 " + ms("p50") + ", p90 " + ms("p90") + ", p99 " + ms("p99") + "\n";
  return out;
}

namespace {

// Display columns of UTF-8 text: one per code point (continuation bytes do not count).
std::size_t display_width(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// `line` in at most `width` columns: control characters become spaces (a reason may hold a tab or a CR), and a
// longer line is cut at a code point boundary and ends in an ellipsis.
std::string fit_width(std::string line, std::size_t width) {
  for (char& c : line)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  if (width == 0 || display_width(line) <= width) return line;
  std::size_t kept = 0, end = 0;
  while (end < line.size()) {
    std::size_t next = end + 1;
    while (next < line.size() && (static_cast<unsigned char>(line[next]) & 0xC0) == 0x80) ++next;
    if (kept + 1 > width - 1) break;
    ++kept;
    end = next;
  }
  return line.substr(0, end) + "\u2026";
}

}  // namespace

std::string fit_screen(const std::string& text, std::size_t width) {
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t nl = text.find('\n', at);
    const std::size_t end = nl == std::string::npos ? text.size() : nl;
    out += fit_width(text.substr(at, end - at), width);
    if (nl == std::string::npos) break;
    out += '\n';
    at = nl + 1;
  }
  return out;
}

namespace {

// The width watch fits its lines to: the terminal's (TIOCGWINSZ), else $COLUMNS, else none (a pipe or file
// keeps whole lines).
std::size_t terminal_columns(bool tty) {
  winsize ws{};
  if (tty && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long n = std::strtol(c, &end, 10);
    if (end != c && *end == '\0' && n > 0 && n < 100000) return static_cast<std::size_t>(n);
  }
  return 0;
}

}  // namespace

TraceText trace_text(const json& reply) {
  TraceText out;
  const json* trace = field(reply, "trace");
  const json* events = trace && trace->is_object() ? field(*trace, "traceEvents") : nullptr;
  if (!events || !events->is_array()) {
    out.problem = !trace                ? "no 'trace'"
                  : !trace->is_object() ? "'trace' is not an object"
                                        : "the trace has no 'traceEvents' array";
    return out;
  }
  out.content = trace->dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  out.events = events->size();
  return out;
}

std::string format_trace_summary(std::size_t events, double seconds, const std::string& file) {
  char line[128];
  std::snprintf(line, sizeof line, "trace: %zu events over %g s -> ", events, seconds);
  return line + (file == "-" ? std::string("stdout") : printable(file)) + " (open in ui.perfetto.dev)\n";
}

std::string watch_screen(const std::string& address, double interval_s, const Outcome& outcome, bool tty, bool first) {
  char stamp[64] = "";
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (::localtime_r(&now, &tm)) std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  char every[32];
  std::snprintf(every, sizeof every, "every %gs", interval_s);
  std::string body = std::string(every) + ": sluicectl status (" + address + ")    " + stamp + "\n\n";
  if (outcome.code == kExitOk)
    body += format_status(outcome.reply);
  else if (outcome.code == kExitRefused)
    body += "daemon: " + printable(outcome.error) + "\n";
  else
    body += printable(outcome.error) + "\n(retrying)\n";
  // The width is read at every refresh: a resized terminal gets lines that fit it.
  return (tty ? "\x1b[H\x1b[2J" : (first ? "" : "\n")) + fit_screen(body, terminal_columns(tty));
}

}  // namespace sluice::ctl
