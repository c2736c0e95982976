#pragma once
// Box geometry for the tracker's association: IoU of a track's predicted box and a detection, and the search
// for the detections a box overlaps (sort and sweep on x), so that a frame computes IoU for the pairs that
// overlap instead of every track x every box.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/detect.hpp"

namespace sluice::track {

struct Corners {
  double x1, y1, x2, y2;
};

// Intersection over union; 0 when they do not overlap or a coordinate is NaN. Inline: the tracker calls it for
// every pair that overlaps, several hundred a frame.
inline double iou(const Corners& a, const kernels::Detection& d) {
  const double iw = std::min(a.x2, static_cast<double>(d.x2)) - std::max(a.x1, static_cast<double>(d.x1));
  const double ih = std::min(a.y2, static_cast<double>(d.y2)) - std::max(a.y1, static_cast<double>(d.y1));
  if (!(iw > 0) || !(ih > 0)) return 0;
  const double inter = iw * ih;
  const double area_a = std::max(0.0, a.x2 - a.x1) * std::max(0.0, a.y2 - a.y1);
  const double area_d = (static_cast<double>(d.x2) - d.x1) * (static_cast<double>(d.y2) - d.y1);
  const double uni = area_a + area_d - inter;
  return uni > 0 ? inter / uni : 0;
}

class OverlapSearch {
 public:
  // Indexes boxes[cols[k]] for each k (trackable boxes: finite, within +-kMaxCoordinate).
  void index(std::span<const kernels::Detection> boxes, std::span<const std::size_t> cols);
  // The places k (into the indexed cols, increasing) of the boxes that overlap `a` (positive intersection width
  // and height): every box with iou(a, box) > 0 is among them. Written into `scratch`, which only grows (no
  // refill from frame to frame); valid until its next use.
  std::span<const int> overlapping(const Corners& a, std::vector<int>& scratch) const;

 private:
  struct Entry {
    float x1, y1, x2, y2;  // the box's own floats: compared with a double, exactly as the double they widen to
    int k;
  };
  // The first place in by_x1_ whose x1 is >= x.
  std::size_t first_at_or_after(double x) const;

  std::vector<Entry> by_x1_;  // ascending x1
  std::vector<Entry> by_k_;   // the same in index order: scanned whole when a box's window is most of them
  double widest_ = 0;         // the largest x2 - x1 indexed
  // A table in place of a binary search: x1's range cut into as many buckets as there are boxes, and per bucket
  // the first place in by_x1_ whose x1 falls in it or later (a lookup, then a step or two).
  double lowest_ = 0, per_unit_ = 0;  // by_x1_'s first x1; buckets per pixel
  std::vector<std::uint32_t> bucket_start_;
};

}  // namespace sluice::track
