// The detection chain on the GPU against the same chain on the CPU: testsrc -> letterbox -> the tiny DFL head
// (f32 on both) -> detections decoded and NMS'ed on the infer stage's stream -> download -> track -> jsonl.
// Every frame delivered; per frame the same boxes (class, 0.5 px) and the same tracks and events (ids through a
// one-to-one map), except where float rounding between cuDNN and oneDNN moves a score across a threshold: at most
// 5% of the frames.
// The model comes from tests/detect/make_detect_reference.py, run into $SLUICE_DETECT_REFERENCE_DIR.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "../detect/tracked_chain.hpp"
#include "../pipeline_helpers.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

// Per (source, sequence): the frame's record.
std::map<std::pair<int, std::uint64_t>, nlohmann::json> by_frame(const std::string& path) {
  std::map<std::pair<int, std::uint64_t>, nlohmann::json> out;
  for (const auto& r : read_jsonl(path)) out[{r["source"].get<int>(), r["sequence"].get<std::uint64_t>()}] = r;
  return out;
}

// Track ids are compared through a one-to-one map built as pairs are met: one score that crosses a threshold
// differently early on shifts every later id by one on that side, which is not a difference in tracking.
class IdMap {
 public:
  bool pair(int gpu, int cpu) {
    if (gpu < 0 || cpu < 0) return gpu == cpu;
    const auto g = gpu_to_cpu_.try_emplace(gpu, cpu).first;
    const auto c = cpu_to_gpu_.try_emplace(cpu, gpu).first;
    return g->second == cpu && c->second == gpu;
  }

 private:
  std::map<int, int> gpu_to_cpu_, cpu_to_gpu_;
};

bool same_boxes(const nlohmann::json& a, const nlohmann::json& b, IdMap& ids) {
  if (a.size() != b.size()) return false;
  bool same = true;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i]["class"] != b[i]["class"] || a[i].value("event", "") != b[i].value("event", "")) same = false;
    if (!ids.pair(a[i].value("track", -1), b[i].value("track", -1))) same = false;
    for (std::size_t k = 0; k < 4; ++k)
      if (std::abs(a[i]["box"][k].get<double>() - b[i]["box"][k].get<double>()) > 0.5) same = false;
  }
  return same;
}

}  // namespace

TEST_CASE("detection chain with the tracker on the GPU matches the CPU chain", "[gpu][detect][track]") {
  const char* dir = std::getenv("SLUICE_DETECT_REFERENCE_DIR");
  if (!dir) {
    WARN("SLUICE_DETECT_REFERENCE_DIR is not set: the detection chain is not compared");
    return;
  }
  const std::string model = (std::filesystem::path(dir) / "yolo_dfl.onnx").string();
  REQUIRE(std::filesystem::exists(model));
  const std::string track = "  - kind: track\n    high_threshold: 0.3\n    new_threshold: 0.3\n    track_buffer: 5\n";
  const std::string gpu_path = "gpu_detect_chain.jsonl", cpu_path = "cpu_detect_chain.jsonl";
  std::remove(gpu_path.c_str());
  std::remove(cpu_path.c_str());
  auto gpu_plan = plan_from(tracked_chain(model, "cuda", track, "    type: jsonl\n    path: " + gpu_path + "\n", 60,
                                          "    precision: f32\n"));
  REQUIRE(gpu_plan.device == Device::cuda);
  const auto tg = run_to_end(std::move(gpu_plan));
  const auto tc = run_to_end(plan_from(tracked_chain(model, "cpu", track, "    type: jsonl\n    path: " + cpu_path + "\n", 60)));
  CHECK(tg.produced == 120);
  CHECK(tg.delivered == 120);
  CHECK(tg.dropped + tg.failed == 0);
  CHECK(tc.delivered == 120);
  const auto g = by_frame(gpu_path), c = by_frame(cpu_path);
  REQUIRE(g.size() == 120);
  REQUIRE(c.size() == 120);
  int same = 0, boxes = 0, tracked = 0, shown = 0;
  std::string differences;
  std::map<int, IdMap> ids;  // per source
  for (const auto& [key, gr] : g) {
    const auto& cr = c.at(key);
    IdMap& map = ids[key.first];
    const bool boxes_same = same_boxes(gr["detections"], cr["detections"], map);
    const bool frame_same = same_boxes(gr.value("track_events", nlohmann::json::array()),
                                       cr.value("track_events", nlohmann::json::array()), map) &&
                            boxes_same;
    if (!frame_same && ++shown <= 5)
      differences += "source " + std::to_string(key.first) + " frame " + std::to_string(key.second) + ": gpu " +
                     gr.dump() + "\n  cpu " + cr.dump() + "\n";
    same += frame_same;
    boxes += static_cast<int>(gr["detections"].size());
    for (const auto& d : gr["detections"]) tracked += d.contains("track");
  }
  CHECK(boxes > 120);    // the shapes are found...
  CHECK(tracked > 60);   // ...and tracked
  INFO("the first frames that differ:\n" << differences);
  CHECK(same >= 114);    // 95% of the frames identical
  std::remove(gpu_path.c_str());
  std::remove(cpu_path.c_str());
}
