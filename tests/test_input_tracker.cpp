// The input tracker: an input completes once it ended and every frame it decoded reached a fate.
#include <catch2/catch.hpp>

#include "runtime/input_tracker.hpp"

using namespace sluice;

namespace {
std::vector<FrameMeta> frames_of(std::uint32_t input, std::uint64_t first, std::uint64_t n) {
  std::vector<FrameMeta> out;
  for (std::uint64_t i = 0; i < n; ++i) {
    FrameMeta m;
    m.input = input;
    m.input_frame = first + i;
    out.push_back(m);
  }
  return out;
}
}  // namespace

TEST_CASE("an input completes when it ended and all its frames are settled", "[inputs]") {
  InputTracker t;
  t.name_source(1, "cam");
  const auto a = t.begin(1, "/data/a.mp4", InputKind::file, 5);
  t.decoded(a, 5);
  t.settle(frames_of(a, 0, 3), FrameFate::delivered);
  t.end(a);
  CHECK(t.take_completed().empty());  // two frames still in flight
  t.settle(frames_of(a, 3, 1), FrameFate::dropped);
  t.settle(frames_of(a, 4, 1), FrameFate::failed);
  const auto done = t.take_completed();
  REQUIRE(done.size() == 1);
  CHECK(done[0].uri == "/data/a.mp4");
  CHECK(done[0].source == "cam");
  CHECK(done[0].delivered == 3);
  CHECK(done[0].dropped == 1);
  CHECK(done[0].failed == 1);
  CHECK(done[0].complete);
  CHECK(t.take_completed().empty());  // handed out once
  CHECK(t.totals().complete == 1);
  CHECK(t.totals().with_errors == 1);  // a failed frame
}

TEST_CASE("frames settled before the end do not complete an input early", "[inputs]") {
  InputTracker t;
  const auto a = t.begin(0, "x", InputKind::file, -1);
  t.decoded(a, 2);
  t.settle(frames_of(a, 0, 2), FrameFate::delivered);
  CHECK(t.take_completed().empty());  // not ended: more frames may come
  t.end(a);
  CHECK(t.take_completed().size() == 1);
}

TEST_CASE("an input that cannot be opened completes at once with its reason", "[inputs]") {
  InputTracker t;
  const auto a = t.begin(0, "missing.mp4", InputKind::file, 0);
  t.end(a, "no such file");
  const auto done = t.take_completed();
  REQUIRE(done.size() == 1);
  CHECK(done[0].error == "no such file");
  CHECK_FALSE(done[0].interrupted);
}

TEST_CASE("an interrupted input is marked so and untracked frames are ignored", "[inputs]") {
  InputTracker t;
  const auto a = t.begin(0, "long.mp4", InputKind::file, 1000);
  t.decoded(a, 10);
  t.settle(frames_of(0, 0, 10), FrameFate::delivered);  // input 0: untracked
  t.settle(frames_of(a, 0, 10), FrameFate::delivered);
  t.interrupt(a);
  const auto done = t.take_completed();
  REQUIRE(done.size() == 1);
  CHECK(done[0].interrupted);
  CHECK(done[0].delivered == 10);
  CHECK(t.totals().with_errors == 0);
}

TEST_CASE("progress reports rate and ETA from settled frames", "[inputs]") {
  InputTracker t;
  const auto a = t.begin(0, "a.mp4", InputKind::file, 100);
  t.decoded(a, 50);
  t.settle(frames_of(a, 0, 50), FrameFate::delivered);
  const auto p = *t.get(a);
  const std::int64_t later = p.started_ns + 2'000'000'000;  // 2 s after it started
  CHECK(p.rate_fps(later) == Approx(25.0));
  REQUIRE(p.eta_s(later));
  CHECK(*p.eta_s(later) == Approx(2.0));
  const auto unknown = t.begin(0, "live", InputKind::stream, -1);
  CHECK_FALSE(t.get(unknown)->eta_s(later));
  CHECK(t.snapshot().size() == 2);
}
