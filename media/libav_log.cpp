#include "media/libav_log.hpp"

#include <spdlog/spdlog.h>

#include <cstdarg>
#include <cstring>
#include <map>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/log.h>
}

#include "runtime/stats.hpp"
#include "runtime/utf8.hpp"

namespace sluice {
namespace {

thread_local LibavLog* t_current = nullptr;

LibavLog& process_log() {
  static auto* log = new LibavLog("libav");  // never destroyed: libav may log during exit
  return *log;
}

// The input a line belongs to: a decoder context carries it in `opaque` (its frame threads' copies too),
// else the thread's scope.
LibavLog* owner_of(void* avcl) noexcept {
  if (avcl) {
    const AVClass* cls = *static_cast<const AVClass* const*>(avcl);
    if (cls == avcodec_get_class())
      if (void* opaque = static_cast<AVCodecContext*>(avcl)->opaque) return static_cast<LibavLog*>(opaque);
  }
  return t_current;
}

// Whether the line comes from a demuxer: libavformat's format context (a protocol logs through its own class).
bool from_format_context(void* avcl) noexcept {
  return avcl != nullptr && *static_cast<const AVClass* const*>(avcl) == avformat_get_class();
}

// libavformat's RTP demuxer (rtpdec.c) reports a sequence gap with this line and nothing else.
constexpr const char* kRtpMissedFormat = "RTP: missed %d packets\n";
// libavformat's http protocol (http.c, check_http_code) logs an error reply's status with this line; its return
// code says only the status's class.
constexpr const char* kHttpErrorFormat = "HTTP error %d %s\n";

void on_libav_log(void* avcl, int level, const char* format, va_list args) {
  if (format != nullptr && std::strcmp(format, kRtpMissedFormat) == 0) {
    va_list copy;
    va_copy(copy, args);
    const int missed = va_arg(copy, int);
    va_end(copy);
    if (LibavLog* log = owner_of(avcl); log != nullptr && missed > 0) log->add_rtp_packets_missed(missed);
  }
  if (format != nullptr && std::strcmp(format, kHttpErrorFormat) == 0) {
    va_list copy;
    va_copy(copy, args);
    const int status = va_arg(copy, int);
    va_end(copy);
    if (LibavLog* log = owner_of(avcl); log != nullptr && status >= 100 && status <= 999) log->set_http_status(status);
  }
  if (level > AV_LOG_WARNING) return;  // info, verbose, debug: never
  const bool error = level <= AV_LOG_ERROR;
  if (!error && !spdlog::should_log(spdlog::level::debug)) return;
  char line[512];
  int print_prefix = 1;
  va_list copy;
  va_copy(copy, args);
  const int n = av_log_format_line2(avcl, level, format, copy, line, sizeof line, &print_prefix);
  va_end(copy);
  if (n < 0) return;
  std::string text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.empty()) return;
  try {
    LibavLog* log = owner_of(avcl);
    (log ? *log : process_log()).take(to_valid_utf8(text), error, error && from_format_context(avcl));
  } catch (...) {  // a log line must never take the decoder down (called from C)
  }
}

// The allowance of each input (by name): windows that ended are forgotten once there are many, so a long job
// over thousands of files keeps a small table.
struct Allowance {
  std::int64_t window_start_ns = 0;
  int lines = 0;
  std::uint64_t suppressed = 0;
};
std::mutex g_allowance_mu;
std::map<std::string, Allowance>& allowances() {
  static auto* table = new std::map<std::string, Allowance>;  // never destroyed: libav may log during exit
  return *table;
}
constexpr std::size_t kAllowancesKept = 64;

// Whether a line of `input` may be logged now; `left_out` gets the count of the window that just ended.
bool admit(const std::string& input, std::int64_t now, std::uint64_t& left_out) {
  std::lock_guard lock(g_allowance_mu);
  auto& table = allowances();
  if (table.size() > kAllowancesKept)
    std::erase_if(table, [&](const auto& entry) {
      return now - entry.second.window_start_ns >= LibavLog::kWindowNs && entry.first != input;
    });
  Allowance& a = table[input];
  if (!a.window_start_ns || now - a.window_start_ns >= LibavLog::kWindowNs) {
    a.window_start_ns = now;
    a.lines = 0;
    left_out = a.suppressed;
    a.suppressed = 0;
  }
  if (a.lines >= LibavLog::kLinesPerWindow) {
    ++a.suppressed;
    return false;
  }
  ++a.lines;
  return true;
}

// "[tcp @ 0x55d0c0a0] Connection refused" -> "Connection refused".
std::string without_context(const std::string& line) {
  if (line.empty() || line.front() != '[') return line;
  const auto end = line.find("] ");
  return end == std::string::npos ? line : line.substr(end + 2);
}

// "Connection to tcp://cam:554?timeout=0 failed" -> "Connection to tcp://cam:554 failed": a URL's query ends
// at the next space.
std::string without_url_queries(std::string line) {
  for (auto scheme = line.find("://"); scheme != std::string::npos; scheme = line.find("://", scheme + 3)) {
    const auto end = line.find(' ', scheme);
    const auto query = line.find('?', scheme);
    if (query != std::string::npos && (end == std::string::npos || query < end))
      line.erase(query, (end == std::string::npos ? line.size() : end) - query);
  }
  return line;
}

}  // namespace

std::string LibavLog::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

std::string LibavLog::last_demuxer_error() const {
  std::lock_guard lock(mu_);
  return last_demuxer_error_;
}

void LibavLog::take(const std::string& line, bool error, bool from_demuxer) {
  if (error) {
    std::lock_guard lock(mu_);
    last_error_ = without_url_queries(without_context(line));
    if (from_demuxer) last_demuxer_error_ = last_error_;
  }
  if (error && hold_errors_.load(std::memory_order_relaxed)) {
    spdlog::debug("FFmpeg ({}): {}", input_, line);
    return;
  }
  std::uint64_t left_out = 0;
  if (!admit(input_, now_ns(), left_out)) return;
  if (left_out)
    spdlog::warn("FFmpeg ({}): {} more line(s) left out in the last {} s", input_, left_out, kWindowNs / 1'000'000'000);
  if (error) spdlog::warn("FFmpeg ({}): {}", input_, line);
  else spdlog::debug("FFmpeg ({}): {}", input_, line);
}

LibavLogScope::LibavLogScope(LibavLog& log) noexcept : previous_(t_current) { t_current = &log; }
LibavLogScope::~LibavLogScope() { t_current = previous_; }

void route_libav_logging() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(on_libav_log); });
}

}  // namespace sluice
