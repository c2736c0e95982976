// The infer stage's `output: detections` end to end on the CPU: testsrc -> preprocess (letterbox) -> infer with a
// tiny detector head -> jsonl, against the same chain's raw head output (npy sink) run through the CPU
// post-processing with the preprocess geometry; and the detect block's configuration errors.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/detect_cpu.hpp"
#include "kernels/preprocess.hpp"
#include "nn/npy.hpp"
#include "tests/pipeline_helpers.hpp"
#include "runtime/errors.hpp"
#include "tests/temp_dir.hpp"

using namespace sluice;
using namespace sluice::test;
namespace fs = std::filesystem;

namespace {

const fs::path kRef = fs::path(SLUICE_BINARY_DIR) / "detect-reference";

std::string chain(const std::string& infer, const std::string& sink, bool letterbox, int frames = 11) {
  return "name: d\ndevice: cpu\nbatch_size: 4\nstages:\n"
         "  - kind: decode\n    pattern: shapes\n    width: 320\n    height: 240\n    frames: " + std::to_string(frames) +
         "\n  - kind: upload\n  - kind: preprocess\n    width: 64\n    height: 64\n    mean: [0, 0, 0]\n"
         "    std: [1, 1, 1]\n    letterbox: " + (letterbox ? "true" : "false") + "\n" +
         "  - kind: infer\n" + infer + "  - kind: download\n  - kind: sink\n" + sink;
}

struct Head {
  std::string name, infer;
  kernels::DetectParams params;
  std::vector<std::string> outputs;  // the model's outputs the head reads, in its order
  std::string block;                 // the infer stage's detect block
};

}  // namespace

TEST_CASE("output: detections end to end on the CPU matches the head's raw output post-processed", "[detect]") {
  TempDir tmp("sluice-detect");
  const std::string labels = (tmp.path / "labels.txt").string();
  std::ofstream(labels) << "circle\nsquare\ntriangle\n";

  std::vector<Head> heads;
  {
    Head h{"yolo_dfl", "    model: " + (kRef / "yolo_dfl.onnx").string() + "\n", {}, {"head"},
           "    detect:\n      head: yolo_anchor_free\n      reg_max: 4\n      strides: [8, 16, 32]\n"
           "      score_threshold: 0.3\n      iou_threshold: 0.5\n      max_detections: 20\n"};
    h.params.head = kernels::HeadKind::yolo_anchor_free;
    h.params.score_threshold = 0.3f;
    h.params.reg_max = 4, h.params.levels = 3, h.params.strides[0] = 8, h.params.strides[1] = 16, h.params.strides[2] = 32;
    h.params.activation = kernels::ScoreActivation::sigmoid;
    h.params.anchor_points = 84;
    heads.push_back(h);
    h = {"yolo_v5", "    model: " + (kRef / "yolo_v5.onnx").string() + "\n", {}, {"p4", "p5"},
         "    detect:\n      head: yolo_anchor_based\n      strides: [16, 32]\n      anchors: [10, 13, 16, 30, 33, 23, 30, 61]\n"
         "      score_threshold: 0.2\n      iou_threshold: 0.5\n      max_detections: 20\n"};
    h.params.head = kernels::HeadKind::yolo_anchor_based;
    h.params.score_threshold = 0.2f;
    h.params.levels = 2, h.params.strides[0] = 16, h.params.strides[1] = 32, h.params.anchors_per_level = 2;
    const float anchors[2][2][2] = {{{10, 13}, {16, 30}}, {{33, 23}, {30, 61}}};
    for (int l = 0; l < 2; ++l)
      for (int k = 0; k < 2; ++k) h.params.anchors[l][k][0] = anchors[l][k][0], h.params.anchors[l][k][1] = anchors[l][k][1];
    h.params.activation = kernels::ScoreActivation::sigmoid;
    h.params.anchor_points = 2 * 16 + 2 * 4;
    heads.push_back(h);
    // DETR: its defaults (sigmoid, every query x class pair, the best Q of them, no NMS) as the block leaves them.
    h = {"detr", "    model: " + (kRef / "detr_head.onnx").string() + "\n", {}, {"logits", "boxes"},
         "    detect:\n      head: detr\n      score_threshold: 0.3\n      max_detections: 20\n"};
    h.params.head = kernels::HeadKind::detr;
    h.params.activation = kernels::ScoreActivation::sigmoid;
    h.params.anchor_points = 16;
    h.params.multi_label = true;
    h.params.pre_nms_top_k = 16;
    h.params.score_threshold = 0.3f;
    heads.push_back(h);
  }
  for (std::size_t hi = 0; hi < heads.size(); ++hi) {
    for (const bool letterbox : {true, false}) {
      Head& h = heads[hi];
      CAPTURE(h.name, letterbox);
      const std::string jsonl = (tmp.path / (h.name + ".jsonl")).string();
      const fs::path npy = tmp.path / (h.name + (letterbox ? "-lb" : "-st"));
      std::remove(jsonl.c_str());
      const std::string detect_yaml = chain(h.infer + "    output: detections\n    labels: " + labels + "\n" + h.block,
                                            "    type: jsonl\n    path: " + jsonl + "\n", letterbox);
      INFO(describe_plan(plan_from(detect_yaml)));
      REQUIRE(run_to_end(plan_from(detect_yaml)).delivered == 11);
      const auto records = read_jsonl(jsonl);
      REQUIRE(records.size() == 11);

      // The same frames' raw head outputs (several: each by its own chain, output_name).
      const std::vector<std::string>& outputs = h.outputs;
      std::vector<std::vector<float>> raw(outputs.size());
      for (std::size_t o = 0; o < outputs.size(); ++o) {
        const fs::path dir = npy / outputs[o];
        REQUIRE(run_to_end(plan_from(chain(h.infer + "    output_name: " + outputs[o] + "\n",
                                           "    type: npy\n    path: " + dir.string() + "\n", letterbox)))
                    .delivered == 11);
        for (int b = 0; b < 3; ++b) {  // 11 frames in batches of 4: 4, 4, 3
          char name[32];
          std::snprintf(name, sizeof name, "batch-%08d.npy", b);
          const nn::NpyArray a = nn::read_npy((dir / name).string());
          raw[o].insert(raw[o].end(), a.data.begin(), a.data.end());
        }
      }
      kernels::DetectParams p = h.params;
      p.items = 11, p.classes = 3, p.input_width = 64, p.input_height = 64;
      p.iou_threshold = 0.5f, p.max_detections = 20;
      kernels::PreprocessParams pre;
      pre.in_width = 320, pre.in_height = 240, pre.out_width = 64, pre.out_height = 64, pre.letterbox = letterbox;
      const kernels::PreprocessGeometry g = kernels::preprocess_geometry(pre);
      CHECK(g.img_h == (letterbox ? 48 : 64));
      p.map = {320, 240, g.crop_x, g.crop_y, g.crop_w, g.crop_h, g.img_x, g.img_y, g.img_w, g.img_h};
      kernels::validate(p);
      kernels::DetectInputs in;
      for (std::size_t o = 0; o < raw.size(); ++o) in.outputs[o] = raw[o].data();
      std::vector<std::byte> want(kernels::detections_item_bytes(p.max_detections) * 11);
      kernels::DetectWorkspaceCpu ws;
      kernels::detect_cpu(p, in, want.data(), ws);
      int total = 0;
      for (int n = 0; n < 11; ++n) {
        CAPTURE(n);
        const auto& r = records[static_cast<std::size_t>(n)];
        REQUIRE(r["sequence"] == n);
        const std::byte* item = want.data() + kernels::detections_item_bytes(p.max_detections) * static_cast<std::size_t>(n);
        kernels::DetectionsHeader head;
        std::memcpy(&head, item, sizeof head);
        const auto* boxes = reinterpret_cast<const kernels::Detection*>(item + sizeof head);
        REQUIRE(r["detections"].size() == static_cast<std::size_t>(head.count));
        total += head.count;
        for (int i = 0; i < head.count; ++i) {
          const auto& d = r["detections"][static_cast<std::size_t>(i)];
          const kernels::Detection& w = boxes[i];
          CHECK(d["class"] == w.class_id);
          CHECK(d["label"] == std::vector<std::string>{"circle", "square", "triangle"}[static_cast<std::size_t>(w.class_id)]);
          CHECK(d["score"].get<double>() == Approx(w.score).epsilon(1e-4));
          const float wb[4] = {w.x1, w.y1, w.x2, w.y2};
          for (std::size_t k = 0; k < 4; ++k) CHECK(d["box"][k].get<double>() == Approx(wb[k]).margin(0.05));
          CHECK(d["box"][2].get<double>() <= 320.0);
          CHECK(d["box"][3].get<double>() <= 240.0);
        }
      }
      CHECK(total > 0);  // the thresholds let some boxes through: the comparison is not empty
    }
  }
}

TEST_CASE("the detect block's keys and values are checked with errors naming them", "[detect]") {
  const std::string model = "    model: " + (kRef / "yolo_dfl.onnx").string() + "\n    output: detections\n";
  const std::string sink = "    type: null\n";
  auto with = [&](const std::string& block) { return chain(model + block, sink, true); };
  const std::string ok = "    detect:\n      head: yolo_anchor_free\n      reg_max: 4\n      strides: [8, 16, 32]\n";
  const std::string note = describe_plan(plan_from(with(ok)));
  CHECK_THAT(note, Catch::Contains("chose: detect yolo_anchor_free (DFL over 4 bins): 3 classes, 84 anchor points"));
  CHECK_THAT(note, Catch::Contains("letterbox of frame 320x240"));
  CHECK_THAT(note, Catch::Contains("detections up to 100 of 3 classes"));
  CHECK_THAT(config_error(with(ok + "      bogus: 1\n")), Catch::Contains("unknown key 'detect.bogus'"));
  CHECK_THAT(config_error(with("    detect:\n      reg_max: 4\n")), Catch::Contains("needs key 'detect.head'"));
  CHECK_THAT(config_error(with("    detect:\n      head: yolo_v99\n")),
             Catch::Contains("key 'detect.head': unknown head layout 'yolo_v99'"));
  CHECK_THAT(config_error(with("    detect:\n      head: yolo_anchor_free\n      reg_max: 4\n      strides: [8, 16]\n")),
             Catch::Contains("the strides give 80 anchor points but the output has 84"));
  CHECK_THAT(config_error(with("    detect:\n      head: yolo_anchor_free\n      reg_max: 16\n      strides: [8, 16, 32]\n")),
             Catch::Contains("gives -45 classes"));
  CHECK_THAT(config_error(with("    detect:\n      head: yolo_anchor_free\n      reg_max: 4\n")),
             Catch::Contains("key 'detect.strides'"));
  CHECK_THAT(config_error(with(ok + "      class_thresholds: [0.5, 0.5]\n")),
             Catch::Contains("key 'detect.class_thresholds': one per class, 3 numbers, got 2"));
  CHECK_THAT(config_error(with(ok + "      iou_threshold: 1.5\n")), Catch::Contains("detect.iou_threshold"));
  CHECK_THAT(config_error(with(ok + "      max_detections: 100000\n")), Catch::Contains("detect.max_detections"));
  CHECK_THAT(config_error(with(ok + "      outputs: [nope]\n")), Catch::Contains("the model has no output 'nope'"));
  CHECK_THAT(config_error(with("    detect:\n      head: ssd\n")), Catch::Contains("reads 2 outputs but the model has 1"));
  CHECK_THAT(config_error(with(ok + "      activation: softmax\n      classes: 4\n")),
             Catch::Contains("key 'detect.classes' is 4"));
  const std::string v5 = "    model: " + (kRef / "yolo_v5.onnx").string() + "\n    output: detections\n";
  CHECK_THAT(config_error(chain(v5 + "    detect:\n      head: yolo_anchor_based\n      strides: [16, 32]\n"
                                     "      anchors: [10, 13, 16]\n", sink, true)),
             Catch::Contains("key 'detect.anchors'"));
  CHECK_THAT(config_error(chain(v5 + "    detect:\n      head: yolo_anchor_based\n      strides: [32, 16]\n"
                                     "      anchors: [10, 13, 16, 30, 33, 23, 30, 61]\n", sink, true)),
             Catch::Contains("output 'p4' is [4, 16, 4, 4], expected [N, 2*(5 + classes), 2, 2] for stride 32"));
}
