// libFuzzer harness: the detection post-processing (kernels/detect_cpu) on hostile head outputs and parameters.
// The bytes choose the head, its sizes and thresholds (raw floats: NaN and Inf included) and then are the model's
// outputs, as f32, repeated to fill them. Parameters validate() refuses are skipped; for the rest every item must
// come back with 0..max_detections boxes, finite, inside the frame. A crash, an overflow or a box outside is a
// finding.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "fuzz/byte_reader.hpp"
#include "kernels/detect_cpu.hpp"

using namespace sluice::kernels;

using Reader = sluice::fuzz::ByteReader;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader r{data, size};
  DetectParams p;
  p.head = static_cast<HeadKind>(r.byte() % std::size(kHeads));
  p.items = 1 + r.byte() % 3;
  p.classes = 1 + r.byte() % 6;
  p.input_width = 32 * (1 + r.byte() % 3);
  p.input_height = 32 * (1 + r.byte() % 3);
  p.activation = static_cast<ScoreActivation>(r.byte() % 3);
  p.reg_max = 1 + r.byte() % 5;
  p.levels = r.byte() % 4;
  const int strides[] = {8, 16, 32, 7};
  for (int l = 0; l < p.levels; ++l) p.strides[l] = strides[r.byte() % 4];
  p.anchors_per_level = r.byte() % 4;
  for (int l = 0; l < p.levels; ++l)
    for (int k = 0; k < p.anchors_per_level; ++k) p.anchors[l][k][0] = r.number(), p.anchors[l][k][1] = r.number();
  p.background_class = static_cast<int>(r.byte() % 8) - 1;
  p.score_threshold = r.number();
  p.iou_threshold = r.number();
  p.multi_label = r.byte() & 1;
  p.pre_nms_top_k = 1 + r.byte() % 64;
  p.max_detections = 1 + r.byte() % 16;
  std::vector<float> thresholds;
  if (r.byte() & 1) {
    for (int c = 0; c < p.classes; ++c) thresholds.push_back(r.number());
    p.class_thresholds = thresholds.data();
  }
  if (r.byte() & 1) p.map = {1 + r.byte(), 1 + r.byte(), r.byte() % 16, r.byte() % 16, 1 + r.byte(), 1 + r.byte(),
                             r.byte() % 8, r.byte() % 8, 1 + r.byte() % 96, 1 + r.byte() % 96};
  const std::int64_t expected = expected_anchor_points(p);
  p.anchor_points = expected > 0 ? expected : 1 + r.byte() % 40;
  try {
    validate(p);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  // Class thresholds are not checked by validate() (the stage takes them from YAML numbers >= 0): keep the
  // fuzzer's raw floats, NaN included, to show they cannot break anything.
  std::vector<float> rest;
  while (r.at + 4 <= size) rest.push_back(r.number());
  if (rest.empty()) rest.push_back(0.f);
  const std::size_t A = static_cast<std::size_t>(p.anchor_points), N = static_cast<std::size_t>(p.items),
                    C = static_cast<std::size_t>(p.classes);
  std::vector<std::vector<float>> outs;
  switch (p.head) {
    case HeadKind::yolo_anchor_free: outs.emplace_back(N * (4 * static_cast<std::size_t>(p.reg_max) + C) * A); break;
    case HeadKind::yolo_anchor_based:
      for (int l = 0; l < p.levels; ++l)
        outs.emplace_back(N * static_cast<std::size_t>(p.anchors_per_level) * (5 + C) *
                          static_cast<std::size_t>(p.input_width / p.strides[l]) *
                          static_cast<std::size_t>(p.input_height / p.strides[l]));
      break;
    case HeadKind::ssd: outs.emplace_back(N * A * 4), outs.emplace_back(N * A * C); break;
    case HeadKind::nms_included:
      outs.emplace_back(N * A * 4), outs.emplace_back(N * A), outs.emplace_back(N * A), outs.emplace_back(N);
      break;
    case HeadKind::detr: outs.emplace_back(N * A * C), outs.emplace_back(N * A * 4); break;
  }
  std::size_t k = 0;
  DetectInputs in;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    for (float& v : outs[i]) v = rest[k++ % rest.size()];
    in.outputs[i] = outs[i].data();
  }
  std::vector<float> priors(A * 4);
  for (float& v : priors) v = rest[k++ % rest.size()];
  in.priors = priors.data();
  std::vector<std::byte> out(detections_item_bytes(p.max_detections) * N);
  DetectWorkspaceCpu ws;
  detect_cpu(p, in, out.data(), ws);
  const float fw = p.map.frame_width > 0 ? static_cast<float>(p.map.frame_width) : static_cast<float>(p.input_width);
  const float fh = p.map.frame_width > 0 ? static_cast<float>(p.map.frame_height) : static_cast<float>(p.input_height);
  for (std::size_t n = 0; n < N; ++n) {
    const std::byte* item = out.data() + detections_item_bytes(p.max_detections) * n;
    DetectionsHeader h;
    std::memcpy(&h, item, sizeof h);
    if (h.count < 0 || h.count > p.max_detections) std::abort();
    for (int i = 0; i < h.count; ++i) {
      Detection d;
      std::memcpy(&d, item + sizeof h + sizeof d * static_cast<std::size_t>(i), sizeof d);
      if (!std::isfinite(d.score) || d.class_id < 0 || d.class_id >= p.classes) std::abort();
      if (!(d.x1 >= 0 && d.x1 <= d.x2 && d.x2 <= fw && d.y1 >= 0 && d.y1 <= d.y2 && d.y2 <= fh)) std::abort();
    }
  }
  return 0;
}
