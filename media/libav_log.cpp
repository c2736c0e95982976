#include "media/libav_log.hpp"

#include <spdlog/spdlog.h>

#include <cstdarg>

extern "C" {
#include <libavcodec/avcodec.h>
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

void on_libav_log(void* avcl, int level, const char* format, va_list args) {
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
    (log ? *log : process_log()).take(to_valid_utf8(text), error);
  } catch (...) {  // a log line must never take the decoder down (called from C)
  }
}

}  // namespace

std::string LibavLog::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

void LibavLog::take(const std::string& line, bool error) {
  const std::int64_t now = now_ns();
  std::uint64_t left_out = 0;
  {
    std::lock_guard lock(mu_);
    if (error) last_error_ = line;
    if (!window_start_ns_ || now - window_start_ns_ >= kWindowNs) {
      window_start_ns_ = now;
      lines_in_window_ = 0;
      left_out = suppressed_;
      suppressed_ = 0;
    }
    if (lines_in_window_ >= kLinesPerWindow) {
      ++suppressed_;
      return;
    }
    ++lines_in_window_;
  }
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
