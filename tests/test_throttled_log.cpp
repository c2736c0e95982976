// Log lines a peer can cause at will, rate-limited (daemon/throttled_log.hpp, issue 33).
#include <catch2/catch.hpp>

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "daemon/throttled_log.hpp"
#include "captured_log.hpp"

using namespace sluice;
using namespace std::chrono_literals;
namespace asio = boost::asio;

TEST_CASE("throttled log: a few lines per window, then one line with the count", "[control][availability][log]") {
  sluice::test::CapturedLog log;
  asio::io_context io;
  {
    ThrottledLog throttled(io, "refusals", spdlog::level::warn, 200ms, 3);
    for (int i = 0; i < 50; ++i) throttled.log("refused #" + std::to_string(i));
    CHECK(log.lines_with("refused #").size() == 3);
    CHECK(throttled.left_out() == 47);
    io.run_for(400ms);  // the window ends: the count goes out
    const auto summary = log.lines_with("more refusals");
    REQUIRE(summary.size() == 1);
    CHECK(summary[0].find("47 more refusals in the last 0.2 s not logged one by one (at most 3 per 0.2 s are)") !=
          std::string::npos);
    throttled.log("refused again");  // a new window: written as it comes
    CHECK(log.lines_with("refused again").size() == 1);
    for (int i = 0; i < 5; ++i) throttled.log("late #" + std::to_string(i));
  }
  // Destroyed with a count not summed up yet: it is written then.
  CHECK(log.lines_with("3 more refusals").size() == 1);
}
