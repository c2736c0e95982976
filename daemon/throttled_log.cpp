#include "daemon/throttled_log.hpp"

namespace sluice {

ThrottledLog::ThrottledLog(boost::asio::io_context& io, std::string what, spdlog::level::level_enum level,
                           std::chrono::milliseconds window, std::size_t lines_per_window)
    : timer_(io), what_(std::move(what)), level_(level), window_(window), lines_per_window_(lines_per_window) {}

ThrottledLog::~ThrottledLog() {
  if (left_out_ > 0) summarize();
}

void ThrottledLog::log(const std::string& line) {
  const auto now = std::chrono::steady_clock::now();
  if (lines_in_window_ == 0 || now - window_start_ >= window_) {
    if (summary_pending_) {  // the timer has not run yet (a busy io_context): the count goes out first
      timer_.cancel();
      summary_pending_ = false;
      summarize();
    }
    window_start_ = now;
    lines_in_window_ = 0;
  }
  if (lines_in_window_ < lines_per_window_) {
    ++lines_in_window_;
    spdlog::log(level_, "{}", line);
    return;
  }
  ++left_out_;
  if (summary_pending_) return;
  summary_pending_ = true;
  timer_.expires_at(window_start_ + window_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;  // cancelled: summed up already, or the log is going away
    summary_pending_ = false;
    summarize();
  });
}

void ThrottledLog::summarize() {
  const auto seconds = std::chrono::duration<double>(window_).count();
  spdlog::log(level_, "{} more {} in the last {:g} s not logged one by one (at most {} per {:g} s are)", left_out_,
              what_, seconds, lines_per_window_, seconds);
  left_out_ = 0;
}

}  // namespace sluice
