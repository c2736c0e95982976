#include "stages/track/tracker.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace sluice::track {
namespace {

Box to_box(const kernels::Detection& d) {
  const double w = static_cast<double>(d.x2) - d.x1, h = static_cast<double>(d.y2) - d.y1;
  return {d.x1 + w / 2, d.y1 + h / 2, w / h, h};
}

Corners corners(const Box& b) {
  const double w = b.aspect * b.h;
  return {b.cx - w / 2, b.cy - b.h / 2, b.cx + w / 2, b.cy + b.h / 2};
}

bool in_range(float v) { return std::isfinite(v) && std::fabs(v) <= kMaxCoordinate; }

// A finite score's bits as an unsigned number in the scores' order (-0 taken as +0, as comparing them does).
std::uint32_t ordered_bits(float score) {
  std::uint32_t u;
  const float f = score + 0.0f;  // -0 + 0 = +0
  std::memcpy(&u, &f, sizeof u);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

}  // namespace

void Tracker::sort_by_score(std::vector<std::size_t>& list, std::span<const kernels::Detection> boxes) {
  // Keys in place of a comparison that reads the boxes: score descending in the high half, index in the low.
  score_keys_.clear();
  for (const std::size_t i : list)
    score_keys_.push_back(std::uint64_t{~ordered_bits(boxes[i].score)} << 32 | static_cast<std::uint32_t>(i));
  std::sort(score_keys_.begin(), score_keys_.end());
  for (std::size_t k = 0; k < list.size(); ++k) list[k] = static_cast<std::uint32_t>(score_keys_[k]);
}

bool trackable(const kernels::Detection& d) noexcept {
  return in_range(d.x1) && in_range(d.y1) && in_range(d.x2) && in_range(d.y2) && std::isfinite(d.score) &&
         static_cast<double>(d.x2) - d.x1 >= kMinSide && static_cast<double>(d.y2) - d.y1 >= kMinSide;
}

void Tracker::associate(std::span<const std::size_t> rows, std::span<const std::size_t> cols,
                        std::span<const kernels::Detection> boxes, float min_iou, bool fuse) {
  if (rows.empty() || cols.empty()) return;
  const double limit = 1.0 - static_cast<double>(min_iou);
  // A pair that does not overlap has similarity 0, cost 1: allowed only below a limit above 1 (min_iou < 0,
  // which the stage refuses); then every pair is a candidate, as in the dense formulation.
  const bool every_pair = limit > 1.0;
  if (!every_pair) overlaps_.index(boxes, cols);
  candidates_.clear();
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Track& t = tracks_[rows[r]];
    const Corners& c = predicted_[rows[r]];
    std::span<const int> near;
    if (every_pair) {
      near_.resize(cols.size());
      for (std::size_t k = 0; k < cols.size(); ++k) near_[k] = static_cast<int>(k);
      near = near_;
    } else {
      near = overlaps_.overlapping(c, near_);
    }
    for (const int k : near) {
      const kernels::Detection& d = boxes[cols[static_cast<std::size_t>(k)]];
      if (p_.per_class && d.class_id != t.last.class_id) continue;
      const double similarity = iou(c, d) * (fuse ? static_cast<double>(d.score) : 1.0);
      // Only pairs the matching may use (match_below would leave the others out): most that overlap do not.
      const double cost = 1.0 - similarity;
      if (cost < limit) candidates_.push_back({static_cast<int>(r), k, cost});
    }
  }
  for (const auto& [r, k] : matcher_.match_below(candidates_, static_cast<int>(rows.size()),
                                                 static_cast<int>(cols.size()), limit)) {
    const std::size_t t = rows[static_cast<std::size_t>(r)], b = cols[static_cast<std::size_t>(k)];
    take(tracks_[t], boxes, b);
    track_used_[t] = 1;
    box_used_[b] = 1;
  }
}

void Tracker::take(Track& t, std::span<const kernels::Detection> boxes, std::size_t b) {
  const kernels::Detection& d = boxes[b];
  t.kf.update(to_box(d));
  t.last = d;
  t.last_frame = frame_;
  t.box = b;
  ++t.hits;
  if (t.state == State::lost) t.state = State::tracked;  // found again: same id, no event
}

void Tracker::confirm(Track& t, std::vector<kernels::Detection>& events) {
  t.state = State::tracked;
  t.id = next_id_;
  next_id_ = next_id_ == std::numeric_limits<std::int32_t>::max() ? 1 : next_id_ + 1;
  kernels::Detection e = t.last;
  e.track_id = t.id;
  e.reserved = static_cast<std::int32_t>(kernels::TrackEvent::track_new);
  events.push_back(e);
}

void Tracker::update(std::span<kernels::Detection> boxes, std::vector<kernels::Detection>& events) {
  ++frame_;
  for (kernels::Detection& d : boxes) d.track_id = -1;
  // The boxes the tracker takes, by score (descending) then index.
  high_.clear();
  low_.clear();
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    if (!trackable(boxes[i])) continue;
    if (boxes[i].score >= p_.high_threshold) high_.push_back(i);
    else if (boxes[i].score >= p_.low_threshold) low_.push_back(i);
  }
  sort_by_score(high_, boxes);
  sort_by_score(low_, boxes);

  confirmed_.clear();
  tentative_.clear();
  predicted_.resize(tracks_.size());
  for (std::size_t t = 0; t < tracks_.size(); ++t) {
    tracks_[t].kf.predict(tracks_[t].state == State::lost);
    predicted_[t] = corners(tracks_[t].kf.mean());
    (tracks_[t].state == State::tentative ? tentative_ : confirmed_).push_back(t);
  }
  box_used_.assign(boxes.size(), 0);
  track_used_.assign(tracks_.size(), 0);

  // 2. confirmed tracks x high boxes; 3. tracked ones left x low boxes.
  associate(confirmed_, high_, boxes, p_.match_iou, p_.fuse_score);
  left_.clear();
  for (const std::size_t t : confirmed_)
    if (!track_used_[t] && tracks_[t].state == State::tracked) left_.push_back(t);
  associate(left_, low_, boxes, p_.low_match_iou, false);
  for (const std::size_t t : left_)
    if (!track_used_[t]) tracks_[t].state = State::lost;

  // 4. tentative tracks x high boxes left (high_ keeps its order: step 5 below walks the same boxes).
  std::erase_if(high_, [&](std::size_t b) { return box_used_[b] != 0; });
  associate(tentative_, high_, boxes, p_.tentative_match_iou, p_.fuse_score);
  for (const std::size_t t : tentative_)
    if (track_used_[t] && tracks_[t].hits >= p_.min_hits) confirm(tracks_[t], events);

  // 6. (before 5, so that the count of tracks frees room) ends of unmatched tentative and long-lost tracks;
  // the others keep their order.
  lost_.clear();
  std::size_t kept = 0;
  for (std::size_t t = 0; t < tracks_.size(); ++t) {
    Track& tr = tracks_[t];
    if (tr.state == State::tentative && !track_used_[t]) continue;
    if (tr.state == State::lost && frame_ - tr.last_frame > static_cast<std::uint64_t>(p_.track_buffer)) {
      kernels::Detection e = tr.last;
      e.track_id = tr.id;
      e.reserved = static_cast<std::int32_t>(kernels::TrackEvent::track_lost);
      lost_.push_back(e);
      continue;
    }
    if (kept != t) tracks_[kept] = tr;
    ++kept;
  }
  tracks_.erase(tracks_.begin() + static_cast<std::ptrdiff_t>(kept), tracks_.end());

  // 5. new tracks from the high boxes nobody took.
  for (const std::size_t b : high_) {
    if (box_used_[b] || boxes[b].score < p_.new_threshold) continue;
    if (tracks_.size() >= static_cast<std::size_t>(p_.max_tracks)) break;
    Track t{Kalman(to_box(boxes[b]))};
    t.hits = 1;
    t.last = boxes[b];
    t.last_frame = frame_;
    t.box = b;
    tracks_.push_back(t);
    if (p_.min_hits <= 1) confirm(tracks_.back(), events);
  }

  // Ids on the boxes of this frame's tracked tracks.
  for (const Track& t : tracks_)
    if (t.state == State::tracked && t.last_frame == frame_) boxes[t.box].track_id = t.id;
  std::sort(lost_.begin(), lost_.end(), [](const auto& a, const auto& b) { return a.track_id < b.track_id; });
  events.insert(events.end(), lost_.begin(), lost_.end());
}

}  // namespace sluice::track
