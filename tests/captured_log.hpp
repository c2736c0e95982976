#pragma once
// The log lines written while it lives: the default logger is replaced by one writing into a ring (`pattern`:
// spdlog's, "%v" the message alone, "%l %v" with its level) and restored at the end.
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

namespace sluice::test {

struct CapturedLog {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(512);
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  explicit CapturedLog(const std::string& pattern = "%v") {
    auto logger = std::make_shared<spdlog::logger>("captured", sink);
    logger->set_pattern(pattern);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  // The lines holding `word`, without their line ends.
  std::vector<std::string> lines_with(const std::string& word) const {
    std::vector<std::string> out;
    for (std::string line : sink->last_formatted()) {
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      if (line.find(word) != std::string::npos) out.push_back(line);
    }
    return out;
  }
};

}  // namespace sluice::test
