#pragma once
// The detection chain the track tests run, on the CPU and on the GPU: two testsrc sources of the same moving
// shapes -> 64x64 letterbox -> the tiny YOLOv8-style DFL head (tests/detect/make_detect_reference.py's
// yolo_dfl.onnx) with output: detections -> download -> `track` (stage text, may be empty) -> sink `sink`.
#include <string>

namespace sluice::test {

inline std::string tracked_chain(const std::string& model, const std::string& device, const std::string& track,
                                 const std::string& sink, int frames, const std::string& infer_extra = {}) {
  return "name: t\ndevice: " + device + "\nbatch_size: 4\nstages:\n"
         "  - kind: decode\n    uri: [testsrc:shapes, testsrc:shapes]\n    width: 320\n    height: 240\n"
         "    frames: " + std::to_string(frames) + "\n"
         "  - kind: upload\n  - kind: preprocess\n    width: 64\n    height: 64\n    mean: [0, 0, 0]\n"
         "    std: [1, 1, 1]\n    letterbox: true\n"
         "  - kind: infer\n    model: " + model + "\n    output: detections\n" + infer_extra +
         "    detect:\n      head: yolo_anchor_free\n      reg_max: 4\n      strides: [8, 16, 32]\n"
         "      score_threshold: 0.3\n      iou_threshold: 0.5\n      max_detections: 20\n"
         "  - kind: download\n" + track + "  - kind: sink\n" + sink;
}

}  // namespace sluice::test
