// classify_boxes end to end on the CPU: two testsrc:shapes sources -> letterbox -> the tiny detector (output:
// detections) -> download -> classify_boxes with a dominant-colour model -> jsonl. Every frame delivered; each
// classified box carries its region's colour (tests/detect/box_colours.hpp); the filters leave boxes alone; the
// plan says the frames are kept; placements that cannot work are refused with the reason.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "runtime/errors.hpp"
#include "tests/detect/box_colours.hpp"
#include "tests/detect/tracked_chain.hpp"
#include "tests/pipeline_helpers.hpp"
#include "tests/temp_dir.hpp"

using namespace sluice;
using namespace sluice::test;
namespace fs = std::filesystem;

namespace {

const fs::path kDetector = fs::path(SLUICE_BINARY_DIR) / "detect-reference" / "yolo_dfl.onnx";

std::string chain(const std::string& stages, const std::string& jsonl, int frames = 24) {
  return tracked_chain(kDetector.string(), "cpu", stages, "    type: jsonl\n    path: " + jsonl + "\n", frames);
}

}  // namespace

TEST_CASE("classify_boxes: each box gets its region's colour, every frame delivered", "[detect][classify_boxes]") {
  TempDir tmp("sluice-classify");
  const std::string model = (tmp.path / "colour.onnx").string(), jsonl = (tmp.path / "out.jsonl").string();
  write_colour_model(model, 16);
  const std::string yaml = chain(colour_stage(model), jsonl);
  const std::string plan = describe_plan(plan_from(yaml));
  INFO(plan);
  CHECK_THAT(plan, Catch::Contains("keeps its input frames (by reference)"));
  CHECK_THAT(plan, Catch::Contains("attribute 'colour' = its top-3 of 3 classes"));
  CHECK_THAT(plan, Catch::Contains("each with 'colour' top-3 of 3"));
  const auto totals = run_to_end(plan_from(yaml));
  check_every_box_coloured(totals, read_jsonl(jsonl), 48);
}

TEST_CASE("classify_boxes: filters and the per-batch limit leave boxes unclassified", "[detect][classify_boxes]") {
  TempDir tmp("sluice-classify-filter");
  const std::string model = (tmp.path / "colour.onnx").string(), jsonl = (tmp.path / "out.jsonl").string();
  write_colour_model(model, 16);
  SECTION("min_width above every box") {
    REQUIRE(run_to_end(plan_from(chain(colour_stage(model, "    min_width: 1000\n"), jsonl))).delivered == 48);
    const ColourCheck check = check_colours(read_jsonl(jsonl), 0.06);
    CHECK(check.boxes > 0);
    CHECK(check.classified == 0);
  }
  SECTION("one box per batch at most") {
    REQUIRE(run_to_end(plan_from(chain(colour_stage(model, "    max_boxes: 1\n"), jsonl))).delivered == 48);
    const auto records = read_jsonl(jsonl);
    const ColourCheck check = check_colours(records, 0.06);
    INFO(check.failures);
    CHECK(check.failures.empty());
    CHECK(check.classified > 0);  // one per batch (up to 4 frames, fewer when the batch timeout cut it short)
    CHECK(check.classified <= 48);
    CHECK(check.boxes > check.classified);
  }
  SECTION("a class the detector does not have") {
    CHECK_THAT(config_error(chain(colour_stage(model, "    classes: [zebra]\n"), jsonl)),
               Catch::Contains("classes: 'zebra' is neither a label of the detector"));
  }
}

TEST_CASE("classify_boxes: refused where it cannot crop", "[detect][classify_boxes]") {
  TempDir tmp("sluice-classify-refused");
  const std::string model = (tmp.path / "colour.onnx").string(), jsonl = (tmp.path / "out.jsonl").string();
  write_colour_model(model, 16);
  SECTION("straight after the detector: on the CPU path its boxes are on the host already") {
    std::string yaml = chain("", jsonl);
    const std::string download = "  - kind: download\n";
    yaml.replace(yaml.find(download), download.size(), colour_stage(model) + download);
    CHECK(config_error(yaml) == "(accepted)");
  }
  SECTION("after a tee, in a branch") {
    std::string yaml = chain("", jsonl);
    yaml = yaml.substr(0, yaml.rfind("  - kind: sink\n")) +
           "  - kind: tee\n    branches:\n      - - kind: sink\n          name: plain\n"
           "      - - kind: classify_boxes\n          model: " + model + "\n          width: 16\n          height: 16\n"
           "        - kind: sink\n          name: classified\n";
    CHECK_THAT(config_error(yaml), Catch::Contains("no frames are kept for it"));
  }
  SECTION("an attribute name that is not a plain word") {
    std::string stage = colour_stage(model);
    stage.replace(stage.find("attribute: colour"), 17, "attribute: \"a b\"");
    CHECK_THAT(config_error(chain(stage, jsonl)), Catch::Contains("use at most 64 letters, digits"));
  }
  SECTION("a model whose input is not the crop size") {
    std::string stage = colour_stage(model);
    stage.replace(stage.find("width: 16"), 9, "width: 32");
    CHECK_THAT(config_error(chain(stage, jsonl)), Catch::Contains("16"));
  }
}

TEST_CASE("classify_boxes: the npy sink stores the attribute as a field of each record", "[detect][classify_boxes]") {
  TempDir tmp("sluice-classify-npy");
  const std::string model = (tmp.path / "colour.onnx").string(), dir = (tmp.path / "npy").string();
  write_colour_model(model, 16);
  const std::string yaml = tracked_chain(kDetector.string(), "cpu", colour_stage(model),
                                         "    type: npy\n    path: " + dir + "\n", 8);
  REQUIRE(run_to_end(plan_from(yaml)).delivered == 16);
  std::ifstream in(fs::path(dir) / "batch-00000000.npy", std::ios::binary);
  REQUIRE(in);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Header, 20 box slots of 32 bytes, then each slot's top-3 (score, index): 16 + 20 * (32 + 3 * 8) per record.
  CHECK_THAT(bytes, Catch::Contains("('colour', [('score', '<f4'), ('index', '<i4')], (20, 3))"));
  const std::size_t header = bytes.find('\n') + 1;
  CHECK((bytes.size() - header) % (16 + 20 * (32 + 3 * 8)) == 0);
}

TEST_CASE("classify_boxes before a track stage: each box keeps its attribute", "[detect][classify_boxes][track]") {
  TempDir tmp("sluice-classify-track");
  const std::string model = (tmp.path / "colour.onnx").string(), jsonl = (tmp.path / "out.jsonl").string();
  write_colour_model(model, 16);
  const std::string track = "  - kind: track\n    high_threshold: 0.3\n    new_threshold: 0.3\n";
  const auto totals = run_to_end(plan_from(chain(colour_stage(model) + track, jsonl)));
  const auto records = read_jsonl(jsonl);
  check_every_box_coloured(totals, records, 48);
  int events = 0;
  for (const auto& r : records)
    for (const auto& e : r.value("track_events", nlohmann::json::array())) events += 1 + 100 * e.contains("attributes");
  CHECK(events > 0);    // the tracker ran
  CHECK(events < 100);  // and its event slots carry no attribute
}
