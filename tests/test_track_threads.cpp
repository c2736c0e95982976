// The track stage on several threads (stages/track.cpp, runtime/fork_join.hpp): every task run once, the
// same output bytes whatever the thread count, each video's frames in order across batches, no frame lost and
// no hang with many more videos than threads. Run under ThreadSanitizer (label concurrency).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/fork_join.hpp"
#include "stages/track/tracker.hpp"
#include "tests/track_scenes.hpp"
#include "tests/track_stage_rig.hpp"

using namespace sluice;
using kernels::Detection;

TEST_CASE("fork_join: every task runs once per call, on many calls, and errors come back to the caller",
          "[track][fork_join]") {
  for (const int threads : {1, 2, 5}) {
    CAPTURE(threads);
    ForkJoin crew(threads, "test");
    CHECK(crew.threads() == threads);
    std::vector<std::atomic<int>> runs(64);
    for (int call = 0; call < 2000; ++call) {
      const std::size_t tasks = static_cast<std::size_t>(call % 65);  // 0, 1 (inline) and more
      crew.run(tasks, [&](std::size_t i) { runs[i].fetch_add(1, std::memory_order_relaxed); });
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
      int expected = 0;
      for (int call = 0; call < 2000; ++call) expected += static_cast<std::size_t>(call % 65) > i;
      CHECK(runs[i].load() == expected);
    }
    std::atomic<int> done{0};
    CHECK_THROWS_WITH(crew.run(16,
                               [&](std::size_t i) {
                                 done.fetch_add(1);
                                 if (i == 3) throw std::runtime_error("task 3");
                               }),
                      "task 3");
    CHECK(done.load() == 16);  // the other tasks still ran
    crew.run(8, [&](std::size_t) { done.fetch_add(1); });  // and the crew goes on
    CHECK(done.load() == 24);
  }
  CHECK_THROWS_AS(ForkJoin(0, "test"), std::invalid_argument);
}

namespace {

// `sources` videos of a scene each, their frames interleaved at random into batches of up to `batch` items (a
// video's frames in order), through the track stage on `threads` threads; returns every output item's bytes (header,
// boxes, events) in batch order, and checks each against one tracker per video fed the same frames in order.
std::vector<std::vector<std::byte>> run_stage(int threads, int sources, int frames, int batch, int boxes) {
  test::TrackStageRig rig(std::map<std::string, std::string>{{"threads", std::to_string(threads)}}, batch, boxes);
  std::vector<std::vector<std::vector<Detection>>> scenes;
  std::vector<track::Tracker> expected;
  for (int s = 0; s < sources; ++s) {
    test::SceneParams p;
    p.objects = 10 + s * 7 % 90;
    p.frames = frames;
    p.hostile = 0.2f;
    scenes.push_back(test::make_scene(p, static_cast<std::uint32_t>(s)));
    expected.emplace_back(track::TrackerParams{});
  }
  std::vector<int> next(static_cast<std::size_t>(sources), 0), order;
  for (int s = 0; s < sources; ++s)
    for (int f = 0; f < frames; ++f) order.push_back(s);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));  // which video's next frame comes when
  std::vector<std::vector<std::byte>> out;
  std::size_t checked = 0;
  for (std::size_t at = 0; at < order.size();) {
    std::vector<test::TrackStageRig::Item> items;
    for (; at < order.size() && static_cast<int>(items.size()) < batch; ++at) {
      const auto s = static_cast<std::size_t>(order[at]);
      const auto f = static_cast<std::size_t>(next[s]++);
      std::vector<Detection> b = scenes[s][f];
      b.resize(std::min<std::size_t>(b.size(), static_cast<std::size_t>(boxes)));
      items.push_back({test::track_frame(static_cast<std::uint32_t>(s + 1), 0, f), static_cast<std::int32_t>(b.size()), b});
    }
    const auto result = rig.process(items);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& [h, slots] = result[i];
      std::vector<Detection> want = items[i].boxes, events;
      expected[items[i].frame.source_id - 1].update(want, events);
      REQUIRE(h.count == static_cast<std::int32_t>(want.size()));
      REQUIRE(h.events == static_cast<std::int32_t>(events.size()));
      REQUIRE((want.empty() || std::memcmp(slots.data(), want.data(), want.size() * sizeof(Detection)) == 0));
      REQUIRE((events.empty() ||
               std::memcmp(slots.data() + want.size(), events.data(), events.size() * sizeof(Detection)) == 0));
      ++checked;
      // The header and the slots it covers (the others keep what the pool's memory held).
      const std::size_t written = static_cast<std::size_t>(h.count + h.events) * sizeof(Detection);
      std::vector<std::byte> bytes(sizeof h + written);
      std::memcpy(bytes.data(), &h, sizeof h);
      std::memcpy(bytes.data() + sizeof h, slots.data(), written);
      out.push_back(std::move(bytes));
    }
  }
  CHECK(checked == order.size());  // every frame came out
  return out;
}

}  // namespace

TEST_CASE("track stage: 1, 2 and 8 threads give the same bytes, and a video's frames stay in order across batches",
          "[track]") {
  const auto one = run_stage(1, 12, 30, 32, 128);
  CHECK(run_stage(2, 12, 30, 32, 128) == one);
  CHECK(run_stage(8, 12, 30, 32, 128) == one);
}

TEST_CASE("track stage: many more videos than threads, many batches: no frame lost, no hang", "[track]") {
  run_stage(3, 64, 40, 64, 48);
}

TEST_CASE("track stage: threads is checked", "[track]") {
  using Given = std::map<std::string, std::string>;
  CHECK_THROWS(test::TrackStageRig(Given{{"threads", "-1"}}));
  CHECK_THROWS(test::TrackStageRig(Given{{"threads", "65"}}));
  test::TrackStageRig rig(Given{{"threads", "3"}});
  CHECK(rig.stage->plan_note().find("3 thread(s)") != std::string::npos);
}
