#include "stages/track/overlap.hpp"

#include <algorithm>

namespace sluice::track {

double iou(const Corners& a, const kernels::Detection& d) {
  const double iw = std::min(a.x2, static_cast<double>(d.x2)) - std::max(a.x1, static_cast<double>(d.x1));
  const double ih = std::min(a.y2, static_cast<double>(d.y2)) - std::max(a.y1, static_cast<double>(d.y1));
  if (!(iw > 0) || !(ih > 0)) return 0;
  const double inter = iw * ih;
  const double area_a = std::max(0.0, a.x2 - a.x1) * std::max(0.0, a.y2 - a.y1);
  const double area_d = (static_cast<double>(d.x2) - d.x1) * (static_cast<double>(d.y2) - d.y1);
  const double uni = area_a + area_d - inter;
  return uni > 0 ? inter / uni : 0;
}

void OverlapSearch::index(std::span<const kernels::Detection> boxes, std::span<const std::size_t> cols) {
  by_x1_.clear();
  widest_ = 0;
  for (std::size_t k = 0; k < cols.size(); ++k) {
    const kernels::Detection& d = boxes[cols[k]];
    by_x1_.push_back({d.x1, d.y1, d.x2, d.y2, static_cast<int>(k)});
    widest_ = std::max(widest_, static_cast<double>(d.x2) - d.x1);
  }
  std::sort(by_x1_.begin(), by_x1_.end(), [](const Entry& a, const Entry& b) { return a.x1 < b.x1; });
}

void OverlapSearch::overlapping(const Corners& a, std::vector<int>& out) const {
  out.clear();
  // A positive intersection needs a.x1 < a.x2 and a.y1 < a.y2 (false for NaN), and x1 < a.x2, x2 > a.x1,
  // y1 < a.y2, y2 > a.y1 of the box. Its x1 is then above a.x1 - widest_; the margin of one pixel covers the
  // rounding of that bound (indexed coordinates are within +-1e7, where a double's step is below 1e-8).
  if (!(a.x1 < a.x2) || !(a.y1 < a.y2)) return;
  const double from = a.x1 - widest_ - 1;
  auto it = std::lower_bound(by_x1_.begin(), by_x1_.end(), from, [](const Entry& e, double x) { return e.x1 < x; });
  // Without branches on the outcome (a box overlaps or not about as often as not in the window; a branch per
  // box mispredicts): every box in the window is written, and counted only when it overlaps.
  const auto end = std::lower_bound(it, by_x1_.end(), a.x2, [](const Entry& e, double x) { return e.x1 < x; });
  out.resize(static_cast<std::size_t>(end - it));
  std::size_t n = 0;
  for (; it != end; ++it) {
    out[n] = it->k;
    n += static_cast<std::size_t>((it->x2 > a.x1) & (it->y1 < a.y2) & (it->y2 > a.y1));
  }
  out.resize(n);
  std::sort(out.begin(), out.end());
}

}  // namespace sluice::track
