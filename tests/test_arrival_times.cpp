// runtime/arrival_times.hpp: a live frame's arrival found again by its presentation time, in any output order,
// within a bounded memory.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "runtime/arrival_times.hpp"

using namespace sluice;

TEST_CASE("arrival times are found by presentation time, in decode or display order", "[arrival]") {
  ArrivalTimes arrivals;
  // Decode order I P B B (pts 0, 3, 1, 2) arriving 10 ms apart; display order 0 1 2 3.
  const std::int64_t pts[] = {0, 3, 1, 2};
  for (int i = 0; i < 4; ++i) arrivals.note(pts[i], 1000 + 10 * i);
  CHECK(arrivals.take(0) == 1000);
  CHECK(arrivals.take(1) == 1020);
  CHECK(arrivals.take(2) == 1030);
  CHECK(arrivals.take(3) == 1010);
  CHECK(arrivals.size() == 0);
  CHECK_FALSE(arrivals.take(3).has_value());  // taken once
  CHECK_FALSE(arrivals.take(99).has_value());  // never noted
}

TEST_CASE("arrival times forget the oldest beyond their capacity, equal times come out in order", "[arrival]") {
  ArrivalTimes arrivals(4);
  for (std::int64_t i = 0; i < 10; ++i) arrivals.note(i, 100 + i);  // 0..5 never come out (lost pictures)
  CHECK(arrivals.size() == 4);
  CHECK_FALSE(arrivals.take(5).has_value());
  for (std::int64_t i = 6; i < 10; ++i) CHECK(arrivals.take(i) == 100 + i);
  arrivals.note(7, 1);
  arrivals.note(7, 2);
  CHECK(arrivals.take(7) == 1);
  CHECK(arrivals.take(7) == 2);
}

TEST_CASE("arrival times match a random reordering with losses", "[arrival]") {
  std::mt19937 rng(7);
  ArrivalTimes arrivals(16);
  std::vector<std::int64_t> pending;
  for (std::int64_t pts = 0; pts < 2000; ++pts) {
    arrivals.note(pts, pts * 33 + 5);
    pending.push_back(pts);
    // The decoder gives back up to 3 pictures held, in any order; 1 in 20 never comes out.
    while (pending.size() > 3 || (!pending.empty() && rng() % 2)) {
      const std::size_t at = rng() % pending.size();
      const std::int64_t out = pending[at];
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(at));
      if (rng() % 20 == 0) continue;
      REQUIRE(arrivals.take(out) == out * 33 + 5);
    }
    REQUIRE(arrivals.size() <= 16);
  }
}
