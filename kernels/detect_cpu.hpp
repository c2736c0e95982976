#pragma once
// CPU twin of the detection post-processing (kernels/detect.hpp): decode, top-k, class-aware NMS, mapping back.
#include <cstdint>
#include <vector>

#include "kernels/detect.hpp"

namespace sluice::kernels {

// The head's outputs, f32, in the order kHeads documents (yolo_anchor_based: one per stride, in detect.strides
// order); priors: ssd only, [A, 4] cx,cy,w,h relative to the input.
struct DetectInputs {
  const float* outputs[kMaxDetectLevels] = {};
  const float* priors = nullptr;
};

// One candidate box in model-input pixels; `index` orders ties (anchor * classes + class; nms_included: the row).
struct DetectCandidate {
  float x1, y1, x2, y2;
  float score;
  std::int32_t class_id;
  std::uint32_t index;
};

// Scratch the CPU twin reuses between batches (grows to the largest item seen, then allocates nothing).
struct DetectWorkspaceCpu {
  std::vector<DetectCandidate> candidates;
  std::vector<std::uint8_t> suppressed;
};

// Per item `i`, writes one item of detections_item_bytes(p.max_detections) bytes at out + i * that.
void detect_cpu(const DetectParams& p, const DetectInputs& in, std::byte* out, DetectWorkspaceCpu& ws);

// The steps, for tests: decode item `item` into `out` (appended, unordered); the selection order (score
// descending, then index ascending); greedy class-aware NMS over `sorted` (already in selection order), keeping
// at most `max_keep`; the indices into `sorted` of the survivors, in order.
void decode_item_cpu(const DetectParams& p, const DetectInputs& in, int item, std::vector<DetectCandidate>& out);
bool candidate_before(const DetectCandidate& a, const DetectCandidate& b) noexcept;
float box_iou(const DetectCandidate& a, const DetectCandidate& b) noexcept;
std::vector<int> nms_cpu(const std::vector<DetectCandidate>& sorted, float iou_threshold, int max_keep);

}  // namespace sluice::kernels
