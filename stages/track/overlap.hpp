#pragma once
// Box geometry for the tracker's association: IoU of a track's predicted box and a detection, and the search
// for the detections a box overlaps (sort and sweep on x), so that a frame computes IoU for the pairs that
// overlap instead of every track x every box.
#include <cstddef>
#include <span>
#include <vector>

#include "kernels/detect.hpp"

namespace sluice::track {

struct Corners {
  double x1, y1, x2, y2;
};

// Intersection over union; 0 when they do not overlap or a coordinate is NaN.
double iou(const Corners& a, const kernels::Detection& d);

class OverlapSearch {
 public:
  // Indexes boxes[cols[k]] for each k (trackable boxes: finite, within +-kMaxCoordinate).
  void index(std::span<const kernels::Detection> boxes, std::span<const std::size_t> cols);
  // Sets `out` to the places k (into the indexed cols, increasing) of the boxes that overlap `a` (positive
  // intersection width and height): every box with iou(a, box) > 0 is among them.
  void overlapping(const Corners& a, std::vector<int>& out) const;

 private:
  struct Entry {
    double x1, y1, x2, y2;
    int k;
  };
  std::vector<Entry> by_x1_;  // ascending x1
  double widest_ = 0;         // the largest x2 - x1 indexed
};

}  // namespace sluice::track
