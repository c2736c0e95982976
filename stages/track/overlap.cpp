#include "stages/track/overlap.hpp"

#include <algorithm>

namespace sluice::track {

void OverlapSearch::index(std::span<const kernels::Detection> boxes, std::span<const std::size_t> cols) {
  by_k_.clear();
  widest_ = 0;
  for (std::size_t k = 0; k < cols.size(); ++k) {
    const kernels::Detection& d = boxes[cols[k]];
    by_k_.push_back({d.x1, d.y1, d.x2, d.y2, static_cast<int>(k)});
    widest_ = std::max(widest_, static_cast<double>(d.x2) - d.x1);
  }
  by_x1_ = by_k_;  // no allocation once its capacity has settled
  std::sort(by_x1_.begin(), by_x1_.end(), [](const Entry& a, const Entry& b) { return a.x1 < b.x1; });
  // Bucket of x: floor((x - lowest_) * per_unit_), which never decreases as x grows, so that every box in an
  // earlier bucket than x's has x1 < x; the lookup then only steps forward within x's bucket.
  const std::size_t n = by_x1_.size();
  bucket_start_.assign(n + 1, static_cast<std::uint32_t>(n));
  if (n == 0) return;
  lowest_ = by_x1_.front().x1;
  const double span = by_x1_.back().x1 - lowest_;
  per_unit_ = span > 0 ? static_cast<double>(n) / span : 0;
  for (std::size_t i = n; i-- > 0;) {
    const auto b = std::min(static_cast<std::size_t>((by_x1_[i].x1 - lowest_) * per_unit_), n);
    bucket_start_[b] = static_cast<std::uint32_t>(i);
  }
  for (std::size_t b = n; b-- > 0;) bucket_start_[b] = std::min(bucket_start_[b], bucket_start_[b + 1]);
}

std::size_t OverlapSearch::first_at_or_after(double x) const {
  const std::size_t n = by_x1_.size();
  if (n == 0 || !(x > lowest_)) return 0;  // also x NaN: the scan's own tests leave every box out then
  const double at = (x - lowest_) * per_unit_;
  std::size_t i = at < static_cast<double>(n) ? bucket_start_[static_cast<std::size_t>(at)] : bucket_start_[n];
  while (i < n && by_x1_[i].x1 < x) ++i;
  return i;
}

std::span<const int> OverlapSearch::overlapping(const Corners& a, std::vector<int>& scratch) const {
  // A positive intersection needs a.x1 < a.x2 and a.y1 < a.y2 (false for NaN), and x1 < a.x2, x2 > a.x1,
  // y1 < a.y2, y2 > a.y1 of the box. Its x1 is then above a.x1 - widest_; the margin of one pixel covers the
  // rounding of that bound (indexed coordinates are within +-1e7, where a double's step is below 1e-8).
  if (!(a.x1 < a.x2) || !(a.y1 < a.y2)) return {};
  const std::size_t begin = first_at_or_after(a.x1 - widest_ - 1), end = first_at_or_after(a.x2);
  if (end <= begin) return {};
  if (scratch.size() < by_x1_.size()) scratch.resize(by_x1_.size());
  // Without branches on the outcome (a box overlaps or not about as often as not in the window; a branch per
  // box mispredicts): every box in the window is written, and counted only when it overlaps.
  int* const out = scratch.data();
  std::size_t n = 0;
  if ((end - begin) * 2 >= by_x1_.size()) {
    // A window of half the boxes or more (large ones): every box in index order instead, with
    // the test the window stands for (x1 < a.x2; x2 > a.x1 puts x1 above a.x1 - widest_), so that the places
    // come out in order without a sort.
    for (const Entry& e : by_k_) {
      out[n] = e.k;
      n += static_cast<std::size_t>((e.x1 < a.x2) & (e.x2 > a.x1) & (e.y1 < a.y2) & (e.y2 > a.y1));
    }
    return {out, n};
  }
  for (std::size_t i = begin; i < end; ++i) {
    const Entry& e = by_x1_[i];
    out[n] = e.k;
    n += static_cast<std::size_t>((e.x2 > a.x1) & (e.y1 < a.y2) & (e.y2 > a.y1));
  }
  std::sort(out, out + n);
  return {out, n};
}

}  // namespace sluice::track
