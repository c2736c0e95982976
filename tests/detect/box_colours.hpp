#pragma once
// classify_boxes checked against the pictures themselves: a "dominant colour" classifier (GlobalAveragePool +
// Flatten: per crop the mean of R, G and B in units of x/255, no softmax) on the boxes the tiny detector finds in
// testsrc:shapes frames, whose pixels the test renders again (TestPatternRenderer). Each classified box's scores
// must be its region's channel means (the crop is resized before the mean: sampled, not averaged, so within a
// tolerance) and its best class the region's dominant channel wherever one channel clearly dominates.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/roi_crop.hpp"
#include "runtime/stats.hpp"
#include "stages/testsrc.hpp"
#include "tests/nn/model_builder.hpp"

namespace sluice::test {

inline void write_colour_model(const std::string& path, int size) {
  nn::test::ModelBuilder m(13);
  m.input("image", {-1, 3, size, size});
  m.node("GlobalAveragePool", {"image"}, {"pooled"});
  m.node("Flatten", {"pooled"}, {"colour"});
  m.output("colour");
  std::ofstream(path, std::ios::binary) << m.bytes();
  std::ofstream(path + ".labels") << "red\ngreen\nblue\n";
}

// The classify_boxes stage of the tests: 16x16 stretched crops, x/255, RGB, top 3 of red/green/blue.
inline std::string colour_stage(const std::string& model, const std::string& extra = {}) {
  return "  - kind: classify_boxes\n    attribute: colour\n    model: " + model + "\n    labels: " + model +
         ".labels\n    width: 16\n    height: 16\n    mean: [0, 0, 0]\n    std: [1, 1, 1]\n    top_k: 3\n"
         "    softmax: false\n    crop_batch: 4\n" + extra;
}

struct ColourCheck {
  int boxes = 0, classified = 0, dominant = 0;  // dominant: boxes where one channel clearly led
  std::string failures;
};

// Checks every box of `records` (the jsonl of a 320x240 testsrc:shapes chain) against its rendered region.
inline ColourCheck check_colours(const std::vector<nlohmann::json>& records, double tolerance) {
  ColourCheck out;
  TestPatternRenderer renderer(TestPattern::shapes, PixelFormat::rgb8, 320, 240, 0);
  std::vector<std::byte> frame(320 * 240 * 3);
  for (const auto& r : records) {
    renderer.render(r["sequence"].get<std::uint64_t>(), frame.data());
    for (const auto& d : r["detections"]) {
      ++out.boxes;
      if (!d.contains("attributes")) continue;
      ++out.classified;
      const auto& b = d["box"];
      const kernels::RoiRect rect = kernels::roi_rect_from_box(0, b[0].get<float>(), b[1].get<float>(),
                                                               b[2].get<float>(), b[3].get<float>(), 320, 240, false);
      std::array<double, 3> mean{};
      for (int y = rect.y; y < rect.y + rect.height; ++y)
        for (int x = rect.x; x < rect.x + rect.width; ++x)
          for (int c = 0; c < 3; ++c) mean[static_cast<std::size_t>(c)] += static_cast<double>(frame[static_cast<std::size_t>((y * 320 + x) * 3 + c)]);
      for (double& m : mean) m /= 255.0 * rect.width * rect.height;
      const auto& colour = d["attributes"]["colour"];
      std::map<int, double> scores;
      for (const auto& c : colour) scores[c["index"].get<int>()] = c["score"].get<double>();
      bool ok = colour.size() == 3 && scores.size() == 3;
      for (int c = 0; c < 3 && ok; ++c) ok = scores.count(c) && std::abs(scores[c] - mean[static_cast<std::size_t>(c)]) <= tolerance;
      std::array<double, 3> sorted = mean;
      std::sort(sorted.begin(), sorted.end());
      if (sorted[2] - sorted[1] > 0.2) {  // a clear leader: it must be the best class, with its label
        ++out.dominant;
        const auto lead = static_cast<int>(std::max_element(mean.begin(), mean.end()) - mean.begin());
        const char* names[] = {"red", "green", "blue"};
        ok = ok && colour[0]["index"] == lead && colour[0]["label"] == names[lead];
      }
      if (!ok && out.failures.size() < 2000)
        out.failures += "frame " + r["sequence"].dump() + " box " + b.dump() + ": region means " +
                        std::to_string(mean[0]) + " " + std::to_string(mean[1]) + " " + std::to_string(mean[2]) +
                        ", got " + colour.dump() + "\n";
    }
  }
  return out;
}

// The chain delivered `frames` records and every box in them was classified with its region's colour.
inline void check_every_box_coloured(const FrameLedger::Totals& totals, const std::vector<nlohmann::json>& records,
                                     std::uint64_t frames) {
  CHECK(totals.produced == frames);
  CHECK(totals.delivered == frames);
  CHECK(totals.dropped + totals.failed == 0);
  REQUIRE(records.size() == frames);
  const ColourCheck check = check_colours(records, 0.06);
  INFO(check.failures);
  CHECK(check.failures.empty());
  CHECK(check.boxes >= static_cast<int>(frames));  // the detector finds the shapes
  CHECK(check.classified == check.boxes);          // no filter: every box
  CHECK(check.dominant >= 5);  // the tiny random head finds mostly background; some boxes are on the shapes
}

}  // namespace sluice::test
