// sluiced's log lines (daemon/log_format.hpp): a message holding a file name or a peer's words is one line with
// no control characters, so it cannot forge a journal record (a newline, then "<0>") or drive a terminal.
#include <catch2/catch.hpp>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <string>

#include "daemon/log_format.hpp"

namespace {

// What one warning with `message` looks like in sluiced's log.
std::string logged(bool journal, const std::string& message) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::logger logger("log-format-test", sink);
  logger.set_formatter(sluice::make_log_formatter(journal));
  logger.warn("source 'in': input {} failed", message);
  return out.str();
}

}  // namespace

TEST_CASE("log format: a message is one line whatever it holds", "[log]") {
  const std::string name = "/in/evil\n<0>sluiced: forged emergency\r\x1b]0;owned\x07\x1b[31mred\xE2\x80\xAE.mp4";
  for (const bool journal : {true, false}) {
    const std::string line = logged(journal, name);
    INFO(line);
    CHECK(line.find('\n') == line.size() - 1);  // only the line's own end
    CHECK(line.find('\r') == std::string::npos);
    CHECK(line.find('\x1b') == std::string::npos);
    CHECK(line.find('\x07') == std::string::npos);
    CHECK(line.find("\xE2\x80\xAE") == std::string::npos);  // a bidi override
    CHECK(line.find("/in/evil\\n<0>sluiced: forged emergency\\r\\x1B]0;owned\\x07\\x1B[31mred\\u{202E}.mp4") !=
          std::string::npos);
  }
  CHECK(logged(true, "x").rfind("<4>source 'in': input x failed\n", 0) == 0);
  const std::string plain = logged(false, "caf\xC3\xA9.mp4");
  CHECK(plain.find(" warning source 'in': input caf\xC3\xA9.mp4 failed\n") != std::string::npos);
}
