// classify_boxes on the GPU path: the crops are cut from the device frames that upload made (kept by reference
// past preprocess, infer and download), classified in batches on the stage's stream, and the scores written by the
// GPU into the pinned records. Checked as on the CPU (tests/detect/box_colours.hpp: each box's scores are its
// region's channel means, its best class the dominant channel), with the classifier in f16, and the same boxes
// classified as the detector found.
// The detector comes from tests/detect/make_detect_reference.py, run into $SLUICE_DETECT_REFERENCE_DIR.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "../detect/box_colours.hpp"
#include "../detect/tracked_chain.hpp"
#include "../pipeline_helpers.hpp"

using namespace sluice;
using namespace sluice::test;

TEST_CASE("classify_boxes on the GPU: each box gets its region's colour", "[gpu][detect][classify_boxes]") {
  const char* dir = std::getenv("SLUICE_DETECT_REFERENCE_DIR");
  if (!dir) {
    WARN("SLUICE_DETECT_REFERENCE_DIR is not set: classify_boxes is not checked on the GPU");
    return;
  }
  const std::string detector = (std::filesystem::path(dir) / "yolo_dfl.onnx").string();
  REQUIRE(std::filesystem::exists(detector));
  const std::string model = "gpu_classify_colour.onnx", jsonl = "gpu_classify_boxes.jsonl";
  write_colour_model(model, 16);
  std::remove(jsonl.c_str());
  auto plan = plan_from(tracked_chain(detector, "cuda", colour_stage(model), "    type: jsonl\n    path: " + jsonl + "\n",
                                      60, "    precision: f32\n"));
  REQUIRE(plan.device == Device::cuda);
  const std::string described = describe_plan(plan);
  INFO(described);
  CHECK_THAT(described, Catch::Contains("keeps its input frames (by reference)"));
  const auto totals = run_to_end(std::move(plan));
  check_every_box_coloured(totals, read_jsonl(jsonl), 120);
}
