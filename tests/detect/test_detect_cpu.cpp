// The CPU detection post-processing (the GPU kernels' twin) against NumPy decoders and torchvision's batched_nms
// (tests/detect/make_detect_reference.py writes the cases into SLUICE_BINARY_DIR/detect-reference), on hand-made
// boxes, and on hostile head outputs (NaN, Inf, huge values and counts).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/detect_cpu.hpp"
#include "nn/npy.hpp"

using namespace sluice::kernels;
namespace fs = std::filesystem;

namespace {

const fs::path kRef = fs::path(SLUICE_BINARY_DIR) / "detect-reference";

struct Item {
  DetectionsHeader header;
  std::vector<Detection> boxes;
};

std::vector<Item> run(const DetectParams& p, const DetectInputs& in) {
  std::vector<std::byte> out(detections_item_bytes(p.max_detections) * static_cast<std::size_t>(p.items));
  DetectWorkspaceCpu ws;
  detect_cpu(p, in, out.data(), ws);
  std::vector<Item> items;
  for (int n = 0; n < p.items; ++n) {
    const std::byte* at = out.data() + detections_item_bytes(p.max_detections) * static_cast<std::size_t>(n);
    Item it;
    std::memcpy(&it.header, at, sizeof it.header);
    REQUIRE(it.header.count >= 0);
    REQUIRE(it.header.count <= p.max_detections);
    it.boxes.resize(static_cast<std::size_t>(it.header.count));
    if (!it.boxes.empty())
      std::memcpy(it.boxes.data(), at + sizeof(DetectionsHeader), it.boxes.size() * sizeof(Detection));
    items.push_back(std::move(it));
  }
  return items;
}

HeadKind head_named(const std::string& name) {
  for (const auto& h : kHeads)
    if (name == h.name) return h.kind;
  throw std::runtime_error("no head " + name);
}

// The case's parameters as DetectParams; output shapes give the anchor points.
DetectParams params_of(const nlohmann::json& c, const std::vector<sluice::nn::NpyArray>& outs,
                       std::vector<float>& thresholds) {
  DetectParams p;
  p.head = head_named(c["head"]);
  p.items = c["items"];
  p.classes = c["classes"];
  p.input_width = c["input_width"];
  p.input_height = c["input_height"];
  const std::string act = c["activation"];
  p.activation = act == "sigmoid" ? ScoreActivation::sigmoid : act == "softmax" ? ScoreActivation::softmax
                                                                                : ScoreActivation::none;
  p.reg_max = c["reg_max"];
  p.levels = static_cast<int>(c["strides"].size());
  for (int l = 0; l < p.levels; ++l) p.strides[l] = c["strides"][static_cast<std::size_t>(l)];
  const auto& anchors = c["anchors"];
  if (!anchors.empty()) {
    p.anchors_per_level = static_cast<int>(anchors.size()) / (2 * p.levels);
    for (std::size_t i = 0; i < anchors.size(); ++i) {
      const std::size_t per = static_cast<std::size_t>(p.anchors_per_level) * 2;
      p.anchors[i / per][(i % per) / 2][i % 2] = anchors[i];
    }
  }
  for (int i = 0; i < 4; ++i) p.variances[i] = c["variances"][static_cast<std::size_t>(i)];
  p.background_class = c["background_class"];
  p.score_threshold = c["score_threshold"];
  for (const auto& t : c["class_thresholds"]) thresholds.push_back(t);
  p.class_thresholds = thresholds.empty() ? nullptr : thresholds.data();
  p.multi_label = c["multi_label"];
  p.iou_threshold = c["iou_threshold"];
  p.pre_nms_top_k = c["pre_nms_top_k"];
  p.max_detections = c["max_detections"];
  switch (p.head) {
    case HeadKind::yolo_anchor_free: p.anchor_points = outs[0].shape[2]; break;
    case HeadKind::yolo_anchor_based: p.anchor_points = expected_anchor_points(p); break;
    case HeadKind::ssd: case HeadKind::nms_included: case HeadKind::detr: p.anchor_points = outs[0].shape[1]; break;
  }
  if (c.contains("geometry")) {
    const auto& g = c["geometry"];
    p.map = {g["frame_width"], g["frame_height"], g["crop_x"], g["crop_y"], g["crop_w"], g["crop_h"],
             g["img_x"], g["img_y"], g["img_w"], g["img_h"]};
  }
  validate(p);
  return p;
}

}  // namespace

TEST_CASE("detect_cpu matches NumPy decoders and torchvision.ops.batched_nms", "[detect]") {
  const char* names[] = {"af_decoded", "af_decoded_multi", "af_decoded_topk", "af_letterbox", "af_dfl",
                         "ab_v5",      "ab_v5_multi",      "ssd_softmax",     "ssd_sigmoid",  "nms_included",
                         "detr_rtdetr", "detr_rtdetr_letterbox", "detr_classic"};
  for (const char* name : names) {
    CAPTURE(name);
    std::ifstream f(kRef / (std::string(name) + ".json"));
    REQUIRE(f.good());
    const nlohmann::json c = nlohmann::json::parse(f);
    std::vector<sluice::nn::NpyArray> outs;
    DetectInputs in;
    for (int i = 0; i < c["outputs"].get<int>(); ++i) {
      outs.push_back(sluice::nn::read_npy((kRef / (std::string(name) + ".out" + std::to_string(i) + ".npy")).string()));
    }
    for (std::size_t i = 0; i < outs.size(); ++i) in.outputs[i] = outs[i].data.data();
    sluice::nn::NpyArray priors;
    if (c["head"] == "ssd") {
      priors = sluice::nn::read_npy((kRef / (std::string(name) + ".priors.npy")).string());
      in.priors = priors.data.data();
    }
    std::vector<float> thresholds;
    const DetectParams p = params_of(c, outs, thresholds);
    const std::vector<Item> got = run(p, in);
    for (int n = 0; n < p.items; ++n) {
      CAPTURE(n);
      const auto& want = c["expected"][static_cast<std::size_t>(n)];
      const Item& item = got[static_cast<std::size_t>(n)];
      REQUIRE(item.boxes.size() == want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        CAPTURE(i);
        const Detection& d = item.boxes[i];
        const float coords[4] = {d.x1, d.y1, d.x2, d.y2};
        for (int k = 0; k < 4; ++k) REQUIRE(coords[k] == Approx(want[i][static_cast<std::size_t>(k)].get<double>()).margin(1e-3));
        REQUIRE(d.score == Approx(want[i][4].get<double>()).epsilon(1e-5).margin(1e-6));
        REQUIRE(d.class_id == want[i][5].get<int>());
        REQUIRE(d.track_id == -1);
      }
    }
  }
}

TEST_CASE("class-aware NMS on hand-made boxes", "[detect]") {
  // Decoded YOLO boxes (cx, cy, w, h) of 2 classes at 4 anchors: anchors 0 and 1 overlap (IoU 90/110 = 0.82)
  // in class 0; anchor 2 is anchor 0's box but class 1; anchor 3 stands alone.
  const int A = 4, C = 2;
  // channel-major [1, 4 + C, A]
  std::vector<float> out = {
      10, 11, 10, 40,   // cx
      10, 10, 10, 40,   // cy
      10, 10, 10, 4,    // w
      10, 10, 10, 4,    // h
      0.9f, 0.8f, 0.f, 0.5f,  // class 0
      0.f, 0.f, 0.7f, 0.f,    // class 1
  };
  DetectParams p;
  p.head = HeadKind::yolo_anchor_free;
  p.items = 1, p.classes = C, p.input_width = 64, p.input_height = 64, p.anchor_points = A;
  p.score_threshold = 0.4f, p.iou_threshold = 0.5f;
  DetectInputs in;
  in.outputs[0] = out.data();
  auto got = run(p, in);
  REQUIRE(got[0].header.candidates == 4);
  REQUIRE(got[0].header.cut == 0);
  REQUIRE(got[0].boxes.size() == 3);
  CHECK(got[0].boxes[0].score == 0.9f);
  CHECK(got[0].boxes[0].x1 == 5.f);
  CHECK(got[0].boxes[1].class_id == 1);
  CHECK(got[0].boxes[2].x1 == 38.f);
  p.iou_threshold = 0.85f;  // now 0.82 is not enough to suppress
  REQUIRE(run(p, in)[0].boxes.size() == 4);
  p.pre_nms_top_k = 2;  // the two best only: anchor 1 is suppressed by 0, so one box is left
  got = run(p, in);
  REQUIRE(got[0].header.cut == 2);
  p.iou_threshold = 0.5f;
  REQUIRE(run(p, in)[0].boxes.size() == 1);
  // Mapped back through a stretch of a 640x480 frame into 64x64: x scales by 10, y by 7.5.
  p.pre_nms_top_k = 1000;
  p.map = {640, 480, 0, 0, 640, 480, 0, 0, 64, 64};
  got = run(p, in);
  CHECK(got[0].boxes[0].x1 == 50.f);
  CHECK(got[0].boxes[0].y2 == 112.5f);
}

TEST_CASE("hostile head outputs: NaN, Inf, huge values and counts stay bounded", "[detect]") {
  std::mt19937 rng(7);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 3e38f, -3e38f, 1e20f, 0.f, 1.f};
  std::uniform_int_distribution<int> pick(0, 7);
  std::normal_distribution<float> normal(0.f, 50.f);
  auto fill = [&](std::vector<float>& v) {
    for (float& x : v) x = pick(rng) < 4 ? specials[pick(rng)] : normal(rng);
  };
  for (const HeadKind head :
       {HeadKind::yolo_anchor_free, HeadKind::yolo_anchor_based, HeadKind::ssd, HeadKind::nms_included, HeadKind::detr}) {
    for (int round = 0; round < 20; ++round) {
      DetectParams p;
      p.head = head;
      p.items = 2, p.classes = 3, p.input_width = 64, p.input_height = 64;
      p.max_detections = 5, p.pre_nms_top_k = 7;
      p.score_threshold = 0.f;
      p.map = {100, 50, 0, 0, 100, 50, 0, 0, 64, 64};
      std::vector<std::vector<float>> outs;
      std::vector<float> priors;
      if (head == HeadKind::yolo_anchor_free) {
        p.reg_max = round % 2 ? 4 : 1;
        p.levels = 2, p.strides[0] = 16, p.strides[1] = 32;
        p.anchor_points = p.reg_max > 1 ? expected_anchor_points(p) : 30;
        p.activation = ScoreActivation::sigmoid;
        outs.emplace_back(static_cast<std::size_t>(2 * (4 * p.reg_max + 3) * p.anchor_points));
      } else if (head == HeadKind::yolo_anchor_based) {
        p.levels = 2, p.strides[0] = 16, p.strides[1] = 32, p.anchors_per_level = 2;
        for (auto& level : p.anchors)
          for (auto& a : level) a[0] = 10, a[1] = 20;
        p.anchor_points = expected_anchor_points(p);
        p.activation = ScoreActivation::sigmoid;
        outs.emplace_back(2 * 2 * 8 * 16);
        outs.emplace_back(2 * 2 * 8 * 4);
      } else if (head == HeadKind::ssd) {
        p.anchor_points = 25;
        p.activation = round % 2 ? ScoreActivation::softmax : ScoreActivation::sigmoid;
        outs.emplace_back(2 * 25 * 4);
        outs.emplace_back(2 * 25 * 3);
        priors.assign(25 * 4, 0.2f);
      } else if (head == HeadKind::detr) {
        p.anchor_points = 12;
        p.activation = round % 2 ? ScoreActivation::softmax : ScoreActivation::sigmoid;
        p.multi_label = round % 3 == 0;
        outs.emplace_back(2 * 12 * 3);
        outs.emplace_back(2 * 12 * 4);
      } else {
        p.anchor_points = 10;
        outs.emplace_back(2 * 10 * 4);
        outs.emplace_back(2 * 10);
        outs.emplace_back(2 * 10);
        outs.emplace_back(2);
      }
      validate(p);
      DetectInputs in;
      for (std::size_t i = 0; i < outs.size(); ++i) {
        fill(outs[i]);
        in.outputs[i] = outs[i].data();
      }
      in.priors = priors.empty() ? nullptr : priors.data();
      for (const Item& item : run(p, in)) {
        REQUIRE(item.header.candidates >= item.header.count);
        for (const Detection& d : item.boxes) {
          REQUIRE(std::isfinite(d.score));
          REQUIRE(d.class_id >= 0);
          REQUIRE(d.class_id < p.classes);
          for (const float v : {d.x1, d.x2}) REQUIRE((v >= 0.f && v <= 100.f));
          for (const float v : {d.y1, d.y2}) REQUIRE((v >= 0.f && v <= 50.f));
          REQUIRE(d.x1 <= d.x2);
          REQUIRE(d.y1 <= d.y2);
        }
      }
    }
  }
}

TEST_CASE("detection params are validated naming the field", "[detect]") {
  DetectParams p;
  p.items = 1, p.classes = 3, p.input_width = 64, p.input_height = 64, p.anchor_points = 10;
  REQUIRE_NOTHROW(validate(p));
  auto fails = [](DetectParams q, const char* what) {
    try {
      validate(q);
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(), Catch::Contains(what));
      return;
    }
    FAIL("accepted: " << what);
  };
  DetectParams q = p;
  q.iou_threshold = std::numeric_limits<float>::quiet_NaN();
  fails(q, "iou_threshold");
  q = p, q.max_detections = kMaxDetections + 1;
  fails(q, "max_detections");
  q = p, q.pre_nms_top_k = 0;
  fails(q, "pre_nms_top_k");
  q = p, q.reg_max = 16;
  fails(q, "strides");
  q = p, q.reg_max = 16, q.levels = 1, q.strides[0] = 8;
  fails(q, "the strides give 64 anchor points but the output has 10");
  q = p, q.levels = 1, q.strides[0] = 7;
  fails(q, "stride 7");
  q = p, q.anchor_points = kMaxAnchorPoints + 1;
  fails(q, "anchor points");
  q = p, q.background_class = 3;
  fails(q, "background_class");
}
