#pragma once
// Log lines that a peer can cause at will (a refused request, a line that is not a request, a connection over
// its class's limit), rate-limited so that a flood of them cannot flood the journal: at most `lines_per_window`
// lines per window are written as they come; the rest are counted, and one summary line at the window's end
// says how many were left out. Runs on one io_context thread (not thread-safe).
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice {

class ThrottledLog {
 public:
  // `what` names the lines in the summary: "refused requests from TCP peers".
  ThrottledLog(boost::asio::io_context& io, std::string what, spdlog::level::level_enum level,
               std::chrono::milliseconds window = std::chrono::seconds(10), std::size_t lines_per_window = 5);
  ~ThrottledLog();  // a count not summed up yet is written now
  ThrottledLog(const ThrottledLog&) = delete;
  ThrottledLog& operator=(const ThrottledLog&) = delete;

  void log(const std::string& line);
  std::uint64_t left_out() const { return left_out_; }  // in the current window, not summed up yet

 private:
  void summarize();

  boost::asio::steady_timer timer_;
  std::string what_;
  spdlog::level::level_enum level_;
  std::chrono::milliseconds window_;
  std::size_t lines_per_window_;
  std::chrono::steady_clock::time_point window_start_{};
  std::size_t lines_in_window_ = 0;
  std::uint64_t left_out_ = 0;
  bool summary_pending_ = false;
};

}  // namespace sluice
