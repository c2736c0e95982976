#include <catch2/catch.hpp>

#include "daemon/watchdog.hpp"

using namespace sluice;
using namespace std::chrono_literals;

TEST_CASE("watchdog: progress or an empty pipeline is healthy - frames stuck in flight are not", "[watchdog]") {
  const auto t0 = WatchdogRule::Clock::time_point{};
  WatchdogRule rule(10s, t0);
  REQUIRE(rule.healthy(5, 3, true, t0 + 5s));       // progress
  REQUIRE(rule.healthy(5, 3, true, t0 + 14s));      // 9 s without progress: still inside the allowance
  REQUIRE_FALSE(rule.healthy(5, 3, true, t0 + 16s));  // 11 s, frames in flight: wedged
  REQUIRE(rule.stalled_s(t0 + 16s) == Approx(11));
  REQUIRE(rule.healthy(6, 3, true, t0 + 17s));      // it moved again
}

TEST_CASE("watchdog: an idle live source and a paused pipeline are not wedges", "[watchdog]") {
  const auto t0 = WatchdogRule::Clock::time_point{};
  WatchdogRule rule(10s, t0);
  REQUIRE(rule.healthy(7, 0, true, t0 + 60s));   // nothing in flight: waiting for frames
  REQUIRE(rule.healthy(7, 2, false, t0 + 120s));  // paused with frames held
  REQUIRE(rule.healthy(7, 2, true, t0 + 125s));   // resumed: the allowance starts from the last healthy look
  REQUIRE_FALSE(rule.healthy(7, 2, true, t0 + 131s));
}
