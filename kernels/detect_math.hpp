#pragma once
// The per-anchor arithmetic shared by the detection kernels and their CPU twin (C++17, host and device): where a
// head keeps an anchor's values, how its box and class scores decode, IoU, and the mapping to the frame.
#include <cmath>
#include <cstdint>

#include "kernels/detect.hpp"
#include "kernels/host_device.hpp"

namespace sluice::kernels::detect {

// SSD's dw/dh clip (torchvision's BoxCoder bbox_xform_clip): exp never overflows.
constexpr float kWhClip = 4.135166556742356f;  // log(1000 / 16)

struct Pointers {
  const float* outputs[kMaxDetectLevels];
  const float* priors;
};

SLUICE_HD float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }
SLUICE_HD bool finite(float x) { return x - x == 0.f; }  // false for NaN and +-Inf (fast-math safe enough)

// yolo_anchor_based and DFL: which level, grid cell and anchor an anchor-point index names.
struct Cell {
  int level, k, x, y, grid_w, grid_h;
};
SLUICE_HD Cell locate(const DetectParams& p, std::int64_t a) {
  Cell c{0, 0, 0, 0, 0, 0};
  const int per = p.head == HeadKind::yolo_anchor_based ? p.anchors_per_level : 1;
  for (int l = 0; l < p.levels; ++l) {
    const int gw = p.input_width / p.strides[l], gh = p.input_height / p.strides[l];
    const std::int64_t n = static_cast<std::int64_t>(gw) * gh * per;
    if (a < n || l == p.levels - 1) {
      c.level = l;
      c.grid_w = gw;
      c.grid_h = gh;
      const std::int64_t plane = static_cast<std::int64_t>(gw) * gh;
      c.k = static_cast<int>(a / plane);
      const std::int64_t r = a % plane;
      c.y = static_cast<int>(r / gw);
      c.x = static_cast<int>(r % gw);
      return c;
    }
    a -= n;
  }
  return c;
}

// Raw value `field` of anchor `a` in item `n`: for yolo_anchor_free the channel, for yolo_anchor_based the
// field of the 5 + classes, for ssd and detr 0..3 the box and 4.. class scores, for nms_included 0..3 box, 4 score,
// 5 class.
SLUICE_HD float value(const DetectParams& p, const Pointers& in, int n, std::int64_t a, int field) {
  const std::int64_t A = p.anchor_points, C = p.classes;
  switch (p.head) {
    case HeadKind::yolo_anchor_free: {
      const std::int64_t channels = 4LL * p.reg_max + C;
      return in.outputs[0][(n * channels + field) * A + a];
    }
    case HeadKind::yolo_anchor_based: {
      const Cell c = locate(p, a);
      const std::int64_t no = 5 + C, plane = static_cast<std::int64_t>(c.grid_w) * c.grid_h;
      return in.outputs[c.level][((static_cast<std::int64_t>(n) * p.anchors_per_level + c.k) * no + field) * plane +
                                 static_cast<std::int64_t>(c.y) * c.grid_w + c.x];
    }
    case HeadKind::ssd:
      return field < 4 ? in.outputs[0][(n * A + a) * 4 + field] : in.outputs[1][(n * A + a) * C + (field - 4)];
    case HeadKind::nms_included:
      return field < 4 ? in.outputs[0][(n * A + a) * 4 + field] : in.outputs[field - 3][n * A + a];
    case HeadKind::detr:
      return field < 4 ? in.outputs[1][(n * A + a) * 4 + field] : in.outputs[0][(n * A + a) * C + (field - 4)];
  }
  return 0.f;
}

// The box of anchor `a` in model-input pixels, x1 <= x2 and y1 <= y2; false when it is not finite.
SLUICE_HD bool decode_box(const DetectParams& p, const Pointers& in, int n, std::int64_t a, float box[4]) {
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  switch (p.head) {
    case HeadKind::yolo_anchor_free:
      if (p.reg_max == 1) {
        const float cx = value(p, in, n, a, 0), cy = value(p, in, n, a, 1);
        const float w = value(p, in, n, a, 2), h = value(p, in, n, a, 3);
        x1 = cx - 0.5f * w, y1 = cy - 0.5f * h, x2 = cx + 0.5f * w, y2 = cy + 0.5f * h;
      } else {
        // DFL: each side's distance is the expectation of a softmax over reg_max bins, in stride units.
        float d[4];
        for (int side = 0; side < 4; ++side) {
          float m = value(p, in, n, a, side * p.reg_max);
          for (int j = 1; j < p.reg_max; ++j) m = fmaxf(m, value(p, in, n, a, side * p.reg_max + j));
          float sum = 0.f, weighted = 0.f;
          for (int j = 0; j < p.reg_max; ++j) {
            const float e = expf(value(p, in, n, a, side * p.reg_max + j) - m);
            sum += e;
            weighted += e * static_cast<float>(j);
          }
          d[side] = weighted / sum;
        }
        const Cell c = locate(p, a);
        const float s = static_cast<float>(p.strides[c.level]);
        const float ax = static_cast<float>(c.x) + 0.5f, ay = static_cast<float>(c.y) + 0.5f;
        x1 = (ax - d[0]) * s, y1 = (ay - d[1]) * s, x2 = (ax + d[2]) * s, y2 = (ay + d[3]) * s;
      }
      break;
    case HeadKind::yolo_anchor_based: {
      const Cell c = locate(p, a);
      const float s = static_cast<float>(p.strides[c.level]);
      const float cx = (2.f * sigmoid(value(p, in, n, a, 0)) - 0.5f + static_cast<float>(c.x)) * s;
      const float cy = (2.f * sigmoid(value(p, in, n, a, 1)) - 0.5f + static_cast<float>(c.y)) * s;
      const float tw = 2.f * sigmoid(value(p, in, n, a, 2)), th = 2.f * sigmoid(value(p, in, n, a, 3));
      const float w = tw * tw * p.anchors[c.level][c.k][0], h = th * th * p.anchors[c.level][c.k][1];
      x1 = cx - 0.5f * w, y1 = cy - 0.5f * h, x2 = cx + 0.5f * w, y2 = cy + 0.5f * h;
      break;
    }
    case HeadKind::ssd: {
      const float* prior = in.priors + a * 4;
      const float pw = prior[2] * static_cast<float>(p.input_width), ph = prior[3] * static_cast<float>(p.input_height);
      const float pcx = prior[0] * static_cast<float>(p.input_width), pcy = prior[1] * static_cast<float>(p.input_height);
      const float cx = pcx + value(p, in, n, a, 0) * p.variances[0] * pw;
      const float cy = pcy + value(p, in, n, a, 1) * p.variances[1] * ph;
      const float w = pw * expf(fminf(value(p, in, n, a, 2) * p.variances[2], kWhClip));
      const float h = ph * expf(fminf(value(p, in, n, a, 3) * p.variances[3], kWhClip));
      x1 = cx - 0.5f * w, y1 = cy - 0.5f * h, x2 = cx + 0.5f * w, y2 = cy + 0.5f * h;
      break;
    }
    case HeadKind::nms_included:
      x1 = value(p, in, n, a, 0), y1 = value(p, in, n, a, 1), x2 = value(p, in, n, a, 2), y2 = value(p, in, n, a, 3);
      break;
    case HeadKind::detr: {
      const float iw = static_cast<float>(p.input_width), ih = static_cast<float>(p.input_height);
      const float cx = value(p, in, n, a, 0) * iw, cy = value(p, in, n, a, 1) * ih;
      const float w = value(p, in, n, a, 2) * iw, h = value(p, in, n, a, 3) * ih;
      x1 = cx - 0.5f * w, y1 = cy - 0.5f * h, x2 = cx + 0.5f * w, y2 = cy + 0.5f * h;
      break;
    }
  }
  if (!(finite(x1) && finite(y1) && finite(x2) && finite(y2))) return false;
  box[0] = fminf(x1, x2), box[2] = fmaxf(x1, x2), box[1] = fminf(y1, y2), box[3] = fmaxf(y1, y2);
  return true;
}

// Softmax needs the row's maximum and normaliser over the classes: computed once per anchor.
struct ScoreRow {
  float max, sum, objectness;
};
SLUICE_HD ScoreRow score_row(const DetectParams& p, const Pointers& in, int n, std::int64_t a) {
  ScoreRow r{0.f, 1.f, 1.f};
  if (p.head == HeadKind::nms_included) return r;  // one score per row, used as given
  const int first = p.head == HeadKind::yolo_anchor_free ? 4 * p.reg_max : p.head == HeadKind::yolo_anchor_based ? 5 : 4;
  if (p.head == HeadKind::yolo_anchor_based) r.objectness = sigmoid(value(p, in, n, a, 4));
  if (p.activation == ScoreActivation::softmax) {
    r.max = value(p, in, n, a, first);
    for (int c = 1; c < p.classes; ++c) r.max = fmaxf(r.max, value(p, in, n, a, first + c));
    r.sum = 0.f;
    for (int c = 0; c < p.classes; ++c) r.sum += expf(value(p, in, n, a, first + c) - r.max);
  }
  return r;
}

// Class `c`'s score at anchor `a` (nms_included: the row's score; its class is value field 5). NaN stays NaN,
// so no threshold passes it.
SLUICE_HD float class_score(const DetectParams& p, const Pointers& in, int n, std::int64_t a, int c,
                            const ScoreRow& r) {
  if (p.head == HeadKind::nms_included) return value(p, in, n, a, 4);
  const int first = p.head == HeadKind::yolo_anchor_free ? 4 * p.reg_max : p.head == HeadKind::yolo_anchor_based ? 5 : 4;
  const float v = value(p, in, n, a, first + c);
  float s = v;
  if (p.activation == ScoreActivation::sigmoid) s = sigmoid(v);
  else if (p.activation == ScoreActivation::softmax) s = expf(v - r.max) / r.sum;
  return s * r.objectness;
}

// nms_included: the class of row `a`, or -1 when it is not a whole number in 0..classes-1.
SLUICE_HD int row_class(const DetectParams& p, const Pointers& in, int n, std::int64_t a) {
  const float v = value(p, in, n, a, 5);
  if (!(v >= 0.f && v < static_cast<float>(p.classes))) return -1;
  const int c = static_cast<int>(v);
  return static_cast<float>(c) == v ? c : -1;
}

// nms_included: how many rows of item `n` are real (the count output, read as 0..M; NaN reads as 0).
SLUICE_HD std::int64_t row_count(const DetectParams& p, const Pointers& in, int n) {
  const float v = in.outputs[3][n];
  if (!(v > 0.f)) return 0;
  if (v >= static_cast<float>(p.anchor_points)) return p.anchor_points;
  return static_cast<std::int64_t>(v);
}

SLUICE_HD float threshold(const DetectParams& p, int c) {
  return p.class_thresholds ? p.class_thresholds[c] : p.score_threshold;
}

// IoU as torchvision computes it (areas without +1; a zero-area pair gives NaN, which suppresses nothing).
SLUICE_HD float iou(float ax1, float ay1, float ax2, float ay2, float bx1, float by1, float bx2, float by2) {
  const float w = fmaxf(fminf(ax2, bx2) - fmaxf(ax1, bx1), 0.f), h = fmaxf(fminf(ay2, by2) - fmaxf(ay1, by1), 0.f);
  const float inter = w * h;
  const float area_a = (ax2 - ax1) * (ay2 - ay1), area_b = (bx2 - bx1) * (by2 - by1);
  return inter / (area_a + area_b - inter);
}

// A box in model-input pixels -> the frame (clipped to it), or clipped to the input when the frame is unknown.
SLUICE_HD void map_box(const BoxMapping& m, int input_width, int input_height, const float in[4], float out[4]) {
  if (m.frame_width <= 0) {
    out[0] = fminf(fmaxf(in[0], 0.f), static_cast<float>(input_width));
    out[2] = fminf(fmaxf(in[2], 0.f), static_cast<float>(input_width));
    out[1] = fminf(fmaxf(in[1], 0.f), static_cast<float>(input_height));
    out[3] = fminf(fmaxf(in[3], 0.f), static_cast<float>(input_height));
    return;
  }
  const float sx = static_cast<float>(m.crop_w) / static_cast<float>(m.img_w);
  const float sy = static_cast<float>(m.crop_h) / static_cast<float>(m.img_h);
  for (int i = 0; i < 4; i += 2) {
    const float x = static_cast<float>(m.crop_x) + (in[i] - static_cast<float>(m.img_x)) * sx;
    const float y = static_cast<float>(m.crop_y) + (in[i + 1] - static_cast<float>(m.img_y)) * sy;
    out[i] = fminf(fmaxf(x, 0.f), static_cast<float>(m.frame_width));
    out[i + 1] = fminf(fmaxf(y, 0.f), static_cast<float>(m.frame_height));
  }
}

}  // namespace sluice::kernels::detect
