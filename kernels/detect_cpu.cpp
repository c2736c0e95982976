#include "kernels/detect_cpu.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/detect_math.hpp"

namespace sluice::kernels {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

detect::Pointers pointers(const DetectInputs& in) {
  detect::Pointers p{};
  for (int i = 0; i < kMaxDetectLevels; ++i) p.outputs[i] = in.outputs[i];
  p.priors = in.priors;
  return p;
}

}  // namespace

void validate(const DetectParams& p) {
  const auto in_range = [](long long v, long long lo, long long hi) { return v >= lo && v <= hi; };
  if (!in_range(p.items, 0, INT_MAX)) fail("items must be >= 0 (got " + std::to_string(p.items) + ")");
  if (!in_range(p.classes, 1, kMaxDetectClasses))
    fail("classes must be in 1.." + std::to_string(kMaxDetectClasses) + " (got " + std::to_string(p.classes) + ")");
  if (!in_range(p.input_width, 1, 65536) || !in_range(p.input_height, 1, 65536))
    fail("the model input size must be 1..65536 pixels a side (got " + std::to_string(p.input_width) + "x" +
         std::to_string(p.input_height) + ")");
  if (!in_range(p.reg_max, 1, kMaxRegMax))
    fail("reg_max must be in 1.." + std::to_string(kMaxRegMax) + " (got " + std::to_string(p.reg_max) + ")");
  if (!in_range(p.levels, 0, kMaxDetectLevels))
    fail("at most " + std::to_string(kMaxDetectLevels) + " strides (got " + std::to_string(p.levels) + ")");
  const bool needs_strides =
      p.head == HeadKind::yolo_anchor_based || (p.head == HeadKind::yolo_anchor_free && p.reg_max > 1);
  if (needs_strides && p.levels == 0) fail("strides must name at least one stride for this head");
  for (int l = 0; l < p.levels; ++l) {
    const int s = p.strides[l];
    if (s < 1 || s > 4096 || p.input_width % s || p.input_height % s)
      fail("stride " + std::to_string(s) + " must be 1..4096 and divide the model input " +
           std::to_string(p.input_width) + "x" + std::to_string(p.input_height));
  }
  if (p.head == HeadKind::yolo_anchor_based) {
    if (!in_range(p.anchors_per_level, 1, kMaxAnchorsPerLevel))
      fail("anchors per stride must be in 1.." + std::to_string(kMaxAnchorsPerLevel) + " (got " +
           std::to_string(p.anchors_per_level) + ")");
    for (int l = 0; l < p.levels; ++l)
      for (int k = 0; k < p.anchors_per_level; ++k)
        for (const float v : p.anchors[l][k])
          if (!(v > 0.f && v <= 65536.f)) fail("anchor sizes must be in (0, 65536] pixels (got " + std::to_string(v) + ")");
  }
  if (p.head == HeadKind::nms_included && p.activation != ScoreActivation::none)
    fail("nms_included scores are used as the model gives them (activation none)");
  if (p.head == HeadKind::yolo_anchor_based && p.activation != ScoreActivation::sigmoid)
    fail("yolo_anchor_based scores are sigmoid(objectness) * sigmoid(class) (activation sigmoid)");
  for (const float v : p.variances)
    if (!(v > 0.f && v <= 100.f)) fail("variances must be in (0, 100] (got " + std::to_string(v) + ")");
  if (!in_range(p.background_class, -1, p.classes - 1))
    fail("background_class must be -1 or a class 0.." + std::to_string(p.classes - 1) + " (got " +
         std::to_string(p.background_class) + ")");
  if (!in_range(p.anchor_points, 1, kMaxAnchorPoints))
    fail("the head has " + std::to_string(p.anchor_points) + " anchor points; 1.." + std::to_string(kMaxAnchorPoints) +
         " are supported");
  if (p.anchor_points * p.classes > (1LL << 31) - 1)
    fail("anchor points x classes (" + std::to_string(p.anchor_points * p.classes) + ") must fit 31 bits");
  if (const std::int64_t e = expected_anchor_points(p); e >= 0 && e != p.anchor_points)
    fail("the strides give " + std::to_string(e) + " anchor points but the output has " +
         std::to_string(p.anchor_points));
  if (!(p.score_threshold >= 0.f && p.score_threshold <= 1e30f))
    fail("score_threshold must be a number >= 0 (got " + std::to_string(p.score_threshold) + ")");
  if (!(p.iou_threshold >= 0.f && p.iou_threshold <= 1.f))
    fail("iou_threshold must be in 0..1 (got " + std::to_string(p.iou_threshold) + ")");
  if (!in_range(p.pre_nms_top_k, 1, kMaxPreNmsTopK))
    fail("pre_nms_top_k must be in 1.." + std::to_string(kMaxPreNmsTopK) + " (got " + std::to_string(p.pre_nms_top_k) + ")");
  if (!in_range(p.max_detections, 1, kMaxDetections))
    fail("max_detections must be in 1.." + std::to_string(kMaxDetections) + " (got " + std::to_string(p.max_detections) + ")");
  const BoxMapping& m = p.map;
  if (m.frame_width < 0 || m.frame_height < 0 || (m.frame_width > 0 && (m.crop_w < 1 || m.crop_h < 1 || m.img_w < 1 || m.img_h < 1)))
    fail("the preprocess geometry is empty");
}

std::int64_t expected_anchor_points(const DetectParams& p) noexcept {
  const bool grid = p.head == HeadKind::yolo_anchor_based || (p.head == HeadKind::yolo_anchor_free && p.reg_max > 1);
  if (!grid) return -1;
  std::int64_t n = 0;
  for (int l = 0; l < p.levels && l < kMaxDetectLevels; ++l) {
    if (p.strides[l] < 1) return 0;
    n += static_cast<std::int64_t>(p.input_width / p.strides[l]) * (p.input_height / p.strides[l]) *
         (p.head == HeadKind::yolo_anchor_based ? p.anchors_per_level : 1);
  }
  return n;
}

void decode_item_cpu(const DetectParams& p, const DetectInputs& in, int item, std::vector<DetectCandidate>& out) {
  const detect::Pointers ptr = pointers(in);
  const std::int64_t rows = p.head == HeadKind::nms_included ? detect::row_count(p, ptr, item) : p.anchor_points;
  for (std::int64_t a = 0; a < rows; ++a) {
    const detect::ScoreRow r = detect::score_row(p, ptr, item, a);
    int best = -1;
    float best_score = 0.f;
    auto add = [&](int c, float s) {
      float box[4];
      if (!detect::decode_box(p, ptr, item, a, box)) return;
      out.push_back({box[0], box[1], box[2], box[3], s, c,
                     static_cast<std::uint32_t>(p.head == HeadKind::nms_included ? a : a * p.classes + c)});
    };
    if (p.head == HeadKind::nms_included) {
      const int c = detect::row_class(p, ptr, item, a);
      const float s = detect::class_score(p, ptr, item, a, 0, r);
      if (c >= 0 && s >= detect::threshold(p, c) && detect::finite(s)) add(c, s);
      continue;
    }
    for (int c = 0; c < p.classes; ++c) {
      if (c == p.background_class) continue;
      const float s = detect::class_score(p, ptr, item, a, c, r);
      if (!(s >= detect::threshold(p, c)) || !detect::finite(s)) continue;
      if (p.multi_label) add(c, s);
      else if (best < 0 || s > best_score) best = c, best_score = s;
    }
    if (!p.multi_label && best >= 0) add(best, best_score);
  }
}

bool candidate_before(const DetectCandidate& a, const DetectCandidate& b) noexcept {
  return a.score > b.score || (a.score == b.score && a.index < b.index);
}

float box_iou(const DetectCandidate& a, const DetectCandidate& b) noexcept {
  return detect::iou(a.x1, a.y1, a.x2, a.y2, b.x1, b.y1, b.x2, b.y2);
}

std::vector<int> nms_cpu(const std::vector<DetectCandidate>& sorted, float iou_threshold, int max_keep) {
  std::vector<int> keep;
  std::vector<std::uint8_t> suppressed(sorted.size(), 0);
  for (std::size_t i = 0; i < sorted.size() && static_cast<int>(keep.size()) < max_keep; ++i) {
    if (suppressed[i]) continue;
    keep.push_back(static_cast<int>(i));
    for (std::size_t j = i + 1; j < sorted.size(); ++j)
      if (!suppressed[j] && sorted[j].class_id == sorted[i].class_id && box_iou(sorted[i], sorted[j]) > iou_threshold)
        suppressed[j] = 1;
  }
  return keep;
}

void detect_cpu(const DetectParams& p, const DetectInputs& in, std::byte* out, DetectWorkspaceCpu& ws) {
  const std::size_t item_bytes = detections_item_bytes(p.max_detections);
  for (int n = 0; n < p.items; ++n) {
    ws.candidates.clear();
    decode_item_cpu(p, in, n, ws.candidates);
    const std::size_t found = ws.candidates.size();
    const std::size_t k = std::min<std::size_t>(found, static_cast<std::size_t>(p.pre_nms_top_k));
    std::partial_sort(ws.candidates.begin(), ws.candidates.begin() + static_cast<std::ptrdiff_t>(k),
                      ws.candidates.end(), candidate_before);
    ws.candidates.resize(k);
    DetectionsHeader header{0, static_cast<std::int32_t>(std::min<std::size_t>(found, INT32_MAX)),
                            static_cast<std::int32_t>(std::min<std::size_t>(found - k, INT32_MAX)), 0};
    std::byte* item = out + item_bytes * static_cast<std::size_t>(n);
    auto* boxes = reinterpret_cast<Detection*>(item + sizeof(DetectionsHeader));
    // The model's own NMS is not redone, nor run on DETR's queries: those rows only go through the thresholds,
    // the top-k and the mapping.
    ws.suppressed.assign(k, 0);
    for (std::size_t i = 0; i < k && header.count < p.max_detections; ++i) {
      if (ws.suppressed[i]) continue;
      const DetectCandidate& c = ws.candidates[i];
      if (head_runs_nms(p.head))
        for (std::size_t j = i + 1; j < k; ++j)
          if (!ws.suppressed[j] && ws.candidates[j].class_id == c.class_id &&
              box_iou(c, ws.candidates[j]) > p.iou_threshold)
            ws.suppressed[j] = 1;
      const float model_box[4] = {c.x1, c.y1, c.x2, c.y2};
      float frame_box[4];
      detect::map_box(p.map, p.input_width, p.input_height, model_box, frame_box);
      boxes[header.count++] = {frame_box[0], frame_box[1], frame_box[2], frame_box[3], c.score, c.class_id, -1, 0};
    }
    std::memcpy(item, &header, sizeof header);
    // The unused tail is zeroed: what a sink writes never holds a previous batch's boxes.
    std::memset(static_cast<void*>(boxes + header.count), 0,
                sizeof(Detection) * static_cast<std::size_t>(p.max_detections - header.count));
  }
}

}  // namespace sluice::kernels
