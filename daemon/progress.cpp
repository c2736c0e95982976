#include "daemon/progress.hpp"

#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string_view>

#include "runtime/printable.hpp"
#include "runtime/utf8.hpp"

namespace sluice {

namespace {

constexpr std::size_t kMaxInputLines = 12;
constexpr int kBarWidth = 20;  // inside the brackets, when there is room

// Display columns of UTF-8 text: one per code point (continuation bytes do not count).
int width(std::string_view s) {
  int w = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++w;
  return w;
}

// Byte offset where the code point numbered `n` (0-based) starts; s.size() when there are fewer.
std::size_t offset_of(std::string_view s, int n) {
  int seen = -1;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && ++seen == n) return i;
  }
  return s.size();
}

std::string head(std::string_view s, int n) { return std::string(s.substr(0, offset_of(s, n))); }
std::string tail(std::string_view s, int n) {
  const int w = width(s);
  return n >= w ? std::string(s) : std::string(s.substr(offset_of(s, w - n)));
}

// Shortens `s` to `max` columns, keeping its start and end ("long_n...ame.mp4").
std::string shorten_middle(std::string_view s, int max) {
  if (width(s) <= max) return std::string(s);
  if (max <= 0) return {};
  if (max <= 3) return head(s, max);
  const int keep = max - 3;
  return head(s, keep / 2) + "..." + tail(s, keep - keep / 2);  // the end (extension, numbering) gets the odd one
}

// Shortens `s` to `max` columns, keeping its start ("no frame for 6...").
std::string shorten_end(std::string_view s, int max) {
  if (width(s) <= max) return std::string(s);
  if (max <= 0) return {};
  if (max <= 3) return head(s, max);
  return head(s, max - 3) + "...";
}

std::string pad_right(std::string s, int w) {
  const int have = width(s);
  if (have < w) s.append(static_cast<std::size_t>(w - have), ' ');
  return s;
}

std::string pad_left(std::string s, int w) {
  const int have = width(s);
  if (have < w) s.insert(0, static_cast<std::size_t>(w - have), ' ');
  return s;
}

std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", std::isfinite(v) ? v : 0.0);
  return buf;
}

// A rate below 0.05 keeps two significant digits: a slow source that did deliver is not shown as 0.0.
std::string fps_text(double fps) {
  if (!(fps > 0 && fps < 0.05)) return fixed1(fps) + " fps";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g", fps);
  return std::string(buf) + " fps";
}

// 0:02, 12:34, 1:02:03
std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-:--";
  const auto total = static_cast<long long>(std::llround(seconds));
  const long long h = total / 3600, m = (total / 60) % 60, s = total % 60;
  char buf[48];
  if (h > 0)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", h, m, s);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", m, s);
  return buf;
}

// Names and reasons are any bytes a file system or a peer chose: shown through printable(), so no ESC sequence
// reaches the terminal and no newline forges a line of the display.
std::string display_name(const InputProgress& p) {
  if (p.kind == InputKind::file || p.kind == InputKind::image || p.kind == InputKind::image_sequence) {
    const std::string name = std::filesystem::path(p.uri).filename().string();
    if (!name.empty()) return printable(name);
  }
  return p.uri.empty() ? "input " + std::to_string(p.id) : printable(shown_uri(p.uri));
}

std::string source_name(const SourceReport& s) { return s.name.empty() ? unnamed_source(s.id) : printable(s.name); }

bool is_job(const SourceReport& s) { return s.inputs_total > 0; }

bool has_ended(const SourceReport& s) {
  return s.state == SourceState::eos || s.state == SourceState::failed || s.state == SourceState::removed;
}

// The rate a source line shows: the current window's while it runs; once it ended, or while the run is too short
// for a window, its frames over the time it ran (never 0.0 for a source that delivered frames). None: it has
// frames but too little time to rate them.
std::optional<double> source_rate(const SourceReport& s) {
  const bool window = !has_ended(s) && (s.fps > 0 || s.frames == 0 || s.state != SourceState::live);
  if (window) return s.fps;
  if (s.frames == 0) return 0.0;
  return s.mean_fps;
}

std::string rate_text(std::optional<double> fps) { return fps ? fps_text(*fps) : "- fps"; }

// "stopped" for a source that a stop (SIGINT, sluicectl stop) ended before its end; its state otherwise.
std::string state_text(const SourceReport& s) {
  return s.stopped && s.state == SourceState::eos ? "stopped" : std::string(to_string(s.state));
}

std::uint64_t files_finished(const SourceReport& s) {
  return std::min<std::uint64_t>(s.inputs_total, s.inputs_done + s.inputs_failed + s.inputs_skipped);
}

// Joins parts with two spaces.
std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) {
    if (p.empty()) continue;
    if (!out.empty()) out += "  ";
    out += p;
  }
  return out;
}

// The last resort: no line is wider than `columns`.
std::string fit(std::string line, int columns) {
  if (columns > 0 && width(line) > columns) line = shorten_end(line, columns);
  return line;
}

std::string source_line(const SourceReport& s, int name_w, int columns) {
  std::vector<std::string> parts;
  parts.push_back(pad_left(rate_text(source_rate(s)), 10));
  if (is_job(s)) {
    parts.push_back("files " + std::to_string(files_finished(s)) + "/" + std::to_string(s.inputs_total));
    if (s.inputs_failed > 0) parts.push_back(std::to_string(s.inputs_failed) + " failed");
    if (s.inputs_skipped > 0) parts.push_back(std::to_string(s.inputs_skipped) + " skipped");
  }
  if (s.dropped > 0) parts.push_back(std::to_string(s.dropped) + " dropped");
  std::string reason;
  if (s.state == SourceState::stalled || s.state == SourceState::backoff || s.state == SourceState::failed) {
    reason = printable(s.reason);
    if (reason.empty() && s.state == SourceState::stalled && s.since_last_frame_s >= 0)
      reason = "no frame for " + fixed1(s.since_last_frame_s) + " s";
    if (s.state == SourceState::backoff && s.next_attempt_in_s >= 0)
      reason += std::string(reason.empty() ? "" : "; ") + "retry in " + fixed1(s.next_attempt_in_s) + " s";
  }
  const std::string state = pad_right(state_text(s), 10);
  std::string name = source_name(s);
  std::string rest = join(parts);
  if (columns > 0) {
    // The name gets what it needs up to its column; the reason gets what is left, then is shortened.
    const int fixed = width(state) + 2 + width(rest);
    const int name_room = std::max(std::min(name_w, 10), std::min(name_w, columns - fixed - 2));
    name = shorten_middle(name, name_room);
    if (!reason.empty()) {
      const int left = columns - (std::max(width(name), name_w) + 2 + fixed + 2);
      reason = left >= 8 ? shorten_end(reason, left) : std::string();
    }
  }
  std::string line = pad_right(name, name_w) + "  " + state + "  " + rest;
  if (!reason.empty()) line += "  " + reason;
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return fit(std::move(line), columns);
}

// The numbers of an input line (everything but the bar and the name).
std::string input_stats(const InputProgress& p, std::int64_t now) {
  const std::uint64_t done = p.settled();
  const double fps = p.rate_fps(now);
  const bool known = p.frames_total > 0;
  std::vector<std::string> stats;
  std::string status;  // instead of the ETA once the reader ended
  if (p.ended && p.interrupted)  // its error only says why it was stopped
    status = p.removed ? "removed" : "stopped";
  else if (p.ended && !p.error.empty())
    status = "error";
  else if (p.ended)
    status = "finishing";
  if (known) {
    const double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(p.frames_total));
    stats.push_back(std::to_string(done) + "/" + std::to_string(p.frames_total) + " frames");
    stats.push_back(std::to_string(static_cast<int>(std::floor(frac * 100))) + "%");
    stats.push_back(fps_text(fps));
    if (!status.empty()) {
      stats.push_back(status);
    } else {
      const auto eta = p.eta_s(now);
      stats.push_back("ETA " + (eta ? duration_text(*eta) : std::string("-:--")));
    }
  } else {
    stats.push_back(std::to_string(done) + " frames");
    stats.push_back(fps_text(fps));
    if (!status.empty()) stats.push_back(status);
  }
  if (p.dropped > 0) stats.push_back(std::to_string(p.dropped) + " dropped");
  if (p.failed > 0) stats.push_back(std::to_string(p.failed) + " failed");
  return join(stats);
}

// The widest bar (cells inside the brackets) that leaves room for the numbers and a name of up to 16
// columns; 0 (no bar) below 6 cells or for an unknown total.
int bar_room(const InputProgress& p, std::int64_t now, int columns) {
  if (p.frames_total <= 0) return 0;
  if (columns <= 0) return kBarWidth;
  const int room = columns - width(input_stats(p, now)) - 2 /*brackets*/ - 2 - 2 - std::min(width(display_name(p)), 16);
  return room >= 6 ? std::min(kBarWidth, room) : 0;
}

std::string input_line(const InputProgress& p, std::int64_t now, int columns, int bar_w) {
  const std::uint64_t done = p.settled();
  const std::string stats_text = input_stats(p, now);
  std::string name = display_name(p);
  std::string line;
  if (bar_w > 0 && p.frames_total > 0) {
    const double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(p.frames_total));
    const int filled = std::clamp(static_cast<int>(std::floor(frac * bar_w)), 0, bar_w);
    line = "[" + std::string(static_cast<std::size_t>(filled), '#') +
           std::string(static_cast<std::size_t>(bar_w - filled), '.') + "]  ";
  }
  line += stats_text;
  if (columns > 0) {
    const int left = columns - width(line) - 2;
    name = left >= 4 ? shorten_middle(name, left) : std::string();
  }
  if (!name.empty()) line += "  " + name;
  return fit(std::move(line), columns);
}

// A source's frames through the sink (delivered, dropped or failed) by the ledger; decoded without one.
std::uint64_t settled_frames(const SourceReport& s, const FrameLedger::Totals* frames) {
  if (!frames) return s.frames;
  const auto it = frames->sources.find(s.id);
  return it == frames->sources.end() ? 0 : it->second.delivered + it->second.dropped + it->second.failed;
}

std::string overall_line(const std::vector<InputProgress>& inputs, const std::vector<SourceReport>& sources,
                         std::int64_t now, int columns, const FrameLedger::Totals* ledger) {
  std::uint64_t total = 0, finished = 0, failed = 0, skipped = 0, frames = 0;
  double rate = 0;
  std::vector<std::uint32_t> job_ids;
  for (const auto& s : sources) {
    if (!is_job(s)) continue;
    job_ids.push_back(s.id);
    total += s.inputs_total;
    finished += files_finished(s);
    failed += s.inputs_failed;
    skipped += s.inputs_skipped;
    frames += settled_frames(s, ledger);
    rate += source_rate(s).value_or(0);
  }
  auto of_job = [&](const InputProgress& p) {
    return std::find(job_ids.begin(), job_ids.end(), p.source_id) != job_ids.end();
  };

  // Frames left: the in-progress inputs' known totals, plus the files not opened yet at the mean frame count
  // of the inputs seen with a known total.
  double input_rate = 0, left = 0, known_sum = 0;
  std::uint64_t open = 0, known_n = 0;
  bool exact = true;
  for (const auto& p : inputs) {
    if (!of_job(p)) continue;
    if (p.frames_total > 0) {
      known_sum += static_cast<double>(p.frames_total);
      ++known_n;
    }
    if (p.complete) continue;
    ++open;
    input_rate += p.rate_fps(now);
    if (p.frames_total >= 0)
      left += std::max(0.0, static_cast<double>(p.frames_total) - static_cast<double>(p.settled()));
    else
      exact = false;  // an input in progress without a known total: no ETA
  }
  if (rate <= 0) rate = input_rate;
  const std::uint64_t unopened = total > finished + open ? total - finished - open : 0;
  bool estimated = false;
  if (unopened > 0) {
    if (known_n > 0) {
      left += static_cast<double>(unopened) * known_sum / static_cast<double>(known_n);
      estimated = true;
    } else {
      exact = false;
    }
  }

  std::string eta = "ETA -:--";
  if (finished >= total)
    eta = "done";
  else if (exact && rate > 0)
    eta = "ETA " + std::string(estimated ? "~" : "") + duration_text(left / rate);
  std::string failed_text = failed > 0 ? std::to_string(failed) + " failed" : "";
  std::string skipped_text = skipped > 0 ? std::to_string(skipped) + " skipped" : "";
  std::string frames_text = std::to_string(frames) + " frames", rate_text = fps_text(rate);
  auto line = [&] {
    return join({"total", "files " + std::to_string(finished) + "/" + std::to_string(total), failed_text,
                 skipped_text, frames_text, rate_text, eta});
  };
  // Narrow: leave out the least useful numbers first (the ETA stays).
  for (std::string* drop : {&frames_text, &skipped_text, &rate_text, &failed_text}) {
    if (columns <= 0 || width(line()) <= columns) break;
    drop->clear();
  }
  return fit(line(), columns);
}

const char* input_state(const InputProgress& p) {
  if (!p.ended) return "decoding";
  if (!p.complete) return "finishing";
  if (p.interrupted) return p.removed ? "removed" : "interrupted";  // stopped, not failed
  return p.error.empty() ? "done" : "failed";
}

double rounded(double v, double scale) { return std::isfinite(v) ? std::round(v * scale) / scale : 0.0; }

}  // namespace

std::string render_progress(const std::vector<InputProgress>& inputs, const std::vector<SourceReport>& sources,
                            std::int64_t now_ns, int columns, const FrameLedger::Totals* frames) {
  std::string out;
  int name_w = 0;
  for (const auto& s : sources) name_w = std::max(name_w, width(source_name(s)));
  name_w = std::min(name_w, columns > 0 ? std::max(8, columns / 4) : 24);
  for (const auto& s : sources) out += source_line(s, name_w, columns) + "\n";

  std::vector<const InputProgress*> open;
  for (const auto& p : inputs)
    if (!p.complete) open.push_back(&p);
  const std::size_t shown = std::min(open.size(), kMaxInputLines), more = open.size() - shown;
  // One bar width for all lines, so that the bars line up: the narrowest that fits every line with a bar.
  int bar_w = kBarWidth;
  for (std::size_t i = 0; i < shown; ++i)
    if (const int room = bar_room(*open[i], now_ns, columns); room > 0) bar_w = std::min(bar_w, room);
  for (std::size_t i = 0; i < shown; ++i)
    out += input_line(*open[i], now_ns, columns, bar_room(*open[i], now_ns, columns) > 0 ? bar_w : 0) + "\n";
  if (more > 0) out += fit("+ " + std::to_string(more) + " more inputs in progress", columns) + "\n";

  if (std::any_of(sources.begin(), sources.end(), is_job)) out += overall_line(inputs, sources, now_ns, columns, frames) + "\n";
  return out;
}

nlohmann::json progress_json(const std::vector<InputProgress>& inputs, std::int64_t now_ns) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : inputs) {
    const auto eta = p.eta_s(now_ns);
    out.push_back({
        {"id", p.id},
        {"source", p.source},
        {"uri", shown_uri(p.uri)},  // as in sources: no user info or query (credentials) to readers
        {"kind", std::string(to_string(p.kind))},
        {"frames_done", p.settled()},
        {"frames_total", p.frames_total >= 0 ? nlohmann::json(p.frames_total) : nlohmann::json(nullptr)},
        {"decoded", p.decoded},
        {"delivered", p.delivered},
        {"dropped", p.dropped},
        {"failed", p.failed},
        {"fps", rounded(p.rate_fps(now_ns), 1000)},
        {"eta_s", eta ? nlohmann::json(rounded(*eta, 1000)) : nlohmann::json(nullptr)},
        {"state", input_state(p)},
        {"error", p.error},
    });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// ProgressDisplay
// ---------------------------------------------------------------------------------------------------

ProgressDisplay::ProgressDisplay(std::FILE* out) : out_(out) {}

ProgressDisplay::~ProgressDisplay() { finish(); }

void ProgressDisplay::write(const std::string& bytes) {
  if (!out_) return;
  std::fwrite(bytes.data(), 1, bytes.size(), out_);
  std::fflush(out_);
}

void ProgressDisplay::update(const std::string& text) {
  std::lock_guard lock(mu_);
  if (lines_ > 0 && text == last_) return;
  std::vector<std::string_view> lines;
  std::string_view rest(text);
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    lines.push_back(rest.substr(0, nl));
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  std::string buf;
  if (lines_ > 0) buf += "\r\x1b[" + std::to_string(lines_) + "A";  // back to the first line of the block
  for (const auto& line : lines) {
    buf += "\x1b[2K";
    buf += line;
    buf += '\n';
  }
  if (static_cast<int>(lines.size()) < lines_) buf += "\x1b[J";  // the block shrank: clear the rest
  write(buf);
  lines_ = static_cast<int>(lines.size());
  last_ = text;
}

void ProgressDisplay::clear() {
  std::lock_guard lock(mu_);
  if (lines_ > 0) write("\r\x1b[" + std::to_string(lines_) + "A\x1b[J");
  lines_ = 0;
  last_.clear();
}

void ProgressDisplay::finish() {
  std::lock_guard lock(mu_);
  lines_ = 0;
  last_.clear();
  if (out_) std::fflush(out_);
}

bool ProgressDisplay::wanted(std::FILE* out) {
  if (!out) return false;
  const int fd = ::fileno(out);
  if (fd < 0 || !::isatty(fd)) return false;
  const char* term = std::getenv("TERM");
  return term && *term && std::string_view(term) != "dumb";
}

bool ProgressDisplay::same_terminal(std::FILE* a, std::FILE* b) {
  if (!a || !b) return false;
  const int fa = ::fileno(a), fb = ::fileno(b);
  if (fa < 0 || fb < 0 || !::isatty(fa) || !::isatty(fb)) return false;
  struct stat sa{}, sb{};
  if (::fstat(fa, &sa) != 0 || ::fstat(fb, &sb) != 0) return false;
  return sa.st_rdev == sb.st_rdev;
}

int ProgressDisplay::columns(std::FILE* out) {
  if (out) {
    const int fd = ::fileno(out);
    winsize ws{};
    if (fd >= 0 && ::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  }
  if (const char* c = std::getenv("COLUMNS")) {
    const int n = std::atoi(c);
    if (n > 0) return n;
  }
  return 80;
}

}  // namespace sluice
