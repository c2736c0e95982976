#include "daemon/log_format.hpp"

#include <cstdlib>
#include <string>
#include <string_view>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "runtime/printable.hpp"

namespace sluice {
namespace {

// "<N>" syslog priority of a log level: journald reads it from the start of each stderr line.
class SyslogPriority final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    static constexpr char kPriority[] = {'7', '7', '6', '4', '3', '2', '6'};  // trace..critical, off
    dest.push_back('<');
    dest.push_back(kPriority[static_cast<int>(msg.level)]);
    dest.push_back('>');
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<SyslogPriority>(); }
};

// The message as printable() shows it (spdlog's own %v copies it raw).
class PrintableMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string shown = printable(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(shown.data(), shown.data() + shown.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PrintableMessage>(); }
};

}  // namespace

std::unique_ptr<spdlog::formatter> make_log_formatter(bool journal) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<SyslogPriority>('*').add_flag<PrintableMessage>('q');
  formatter->set_pattern(journal ? "%*%q" : "%Y-%m-%dT%H:%M:%S.%e %^%l%$ %q");
  return formatter;
}

void setup_logging() {
  const bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
  spdlog::set_default_logger(journal ? spdlog::stderr_logger_mt("sluiced") : spdlog::stderr_color_mt("sluiced"));
  spdlog::set_formatter(make_log_formatter(journal));
}

}  // namespace sluice
