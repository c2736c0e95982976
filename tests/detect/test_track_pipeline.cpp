// The track stage end to end on the CPU: two testsrc sources of the same moving shapes -> preprocess -> infer
// (tiny detector head, output: detections) -> download -> track -> jsonl. Every frame is delivered; each source
// gets the same ids and events (per-source state, deterministic); ids and events agree with each other.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "runtime/errors.hpp"
#include "tests/detect/tracked_chain.hpp"
#include "tests/pipeline_helpers.hpp"
#include "tests/temp_dir.hpp"

using namespace sluice;
using namespace sluice::test;
namespace fs = std::filesystem;

namespace {

const fs::path kModel = fs::path(SLUICE_BINARY_DIR) / "detect-reference" / "yolo_dfl.onnx";

std::string tracked_chain(const std::string& track, const std::string& sink, int frames) {
  return sluice::test::tracked_chain(kModel.string(), "cpu", track, sink, frames);
}

}  // namespace

TEST_CASE("track end to end: ids and new/lost events in the jsonl records, every frame delivered", "[detect][track]") {
  TempDir tmp("sluice-track");
  const std::string jsonl = (tmp.path / "tracks.jsonl").string();
  const std::string track = "  - kind: track\n    high_threshold: 0.3\n    new_threshold: 0.3\n    track_buffer: 5\n";
  const std::string yaml = tracked_chain(track, "    type: jsonl\n    path: " + jsonl + "\n", 40);
  const std::string plan = describe_plan(plan_from(yaml));
  INFO(plan);
  CHECK_THAT(plan, Catch::Contains("ByteTrack per input of each source: high >= 0.3, low >= 0.1, new >= 0.3"));
  CHECK_THAT(plan, Catch::Contains("output: up to 20 boxes, then up to 40 track events"));
  const auto totals = run_to_end(plan_from(yaml));
  CHECK(totals.produced == 80);
  CHECK(totals.delivered == 80);
  CHECK(totals.dropped + totals.failed == 0);
  const auto records = read_jsonl(jsonl);
  REQUIRE(records.size() == 80);

  // Per source, by sequence: what the tracker said (boxes' tracks, events).
  std::map<int, std::map<std::uint64_t, nlohmann::json>> by_source;
  for (const auto& r : records) {
    nlohmann::json said = {{"tracks", nlohmann::json::array()}, {"events", r.value("track_events", nlohmann::json::array())}};
    for (const auto& d : r["detections"]) said["tracks"].push_back(d.value("track", -1));
    by_source[r["source"].get<int>()][r["sequence"].get<std::uint64_t>()] = said;
  }
  REQUIRE(by_source.size() == 2);
  const auto& first = by_source.begin()->second;
  const auto& second = std::next(by_source.begin())->second;
  REQUIRE(first.size() == 40);
  CHECK(first == second);  // the same frames, each with its own tracker: the same ids and events

  // Ids and events agree: an id appears first on the frame of its "new" event, never after its "lost" one.
  std::set<int> started, ended;
  int tracked = 0, news = 0;
  for (const auto& [sequence, said] : first) {
    CAPTURE(sequence, said);
    std::set<int> news_here;
    for (const auto& e : said["events"]) {
      const int id = e["track"].get<int>();
      REQUIRE(e.contains("box"));
      if (e["event"] == "new") {
        CHECK(started.insert(id).second);
        news_here.insert(id);
        ++news;
      } else {
        CHECK(e["event"] == "lost");
        CHECK(started.count(id) == 1);
        CHECK(ended.insert(id).second);
      }
    }
    for (const auto& t : said["tracks"]) {
      const int id = t.get<int>();
      if (id < 0) continue;
      ++tracked;
      CHECK(started.count(id) == 1);
      CHECK(ended.count(id) == 0);
    }
  }
  CHECK(news > 0);
  CHECK(tracked > news);  // tracks last beyond their first frame
}

TEST_CASE("track: where it may stand and its thresholds are checked", "[detect][track]") {
  const std::string sink = "    type: null\n";
  CHECK_THAT(config_error("name: t\ndevice: cpu\nstages:\n  - kind: decode\n    pattern: shapes\n    frames: 2\n"
                          "  - kind: track\n  - kind: sink\n" + sink),
             Catch::Contains("stage 'track' (track): tracks boxes: needs detections"));
  CHECK_THAT(config_error(tracked_chain("  - kind: track\n    high_threshold: 0.7\n", sink, 2)),
             Catch::Contains("new_threshold 0.6 is below high_threshold 0.7"));
  CHECK_THAT(config_error(tracked_chain("  - kind: track\n    low_threshold: 0.6\n", sink, 2)),
             Catch::Contains("low_threshold 0.6 is above high_threshold 0.5"));
  CHECK_THAT(config_error(tracked_chain("  - kind: track\n    buffer: 3\n", sink, 2)), Catch::Contains("buffer"));
}
