#include "stages/track/tracker.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "stages/track/hungarian.hpp"

namespace sluice::track {
namespace {

Box to_box(const kernels::Detection& d) {
  const double w = static_cast<double>(d.x2) - d.x1, h = static_cast<double>(d.y2) - d.y1;
  return {d.x1 + w / 2, d.y1 + h / 2, w / h, h};
}

struct Corners {
  double x1, y1, x2, y2;
};

Corners corners(const Box& b) {
  const double w = b.aspect * b.h;
  return {b.cx - w / 2, b.cy - b.h / 2, b.cx + w / 2, b.cy + b.h / 2};
}

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

bool in_range(float v) { return std::isfinite(v) && std::fabs(v) <= kMaxCoordinate; }

}  // namespace

bool trackable(const kernels::Detection& d) noexcept {
  return in_range(d.x1) && in_range(d.y1) && in_range(d.x2) && in_range(d.y2) && std::isfinite(d.score) &&
         static_cast<double>(d.x2) - d.x1 >= kMinSide && static_cast<double>(d.y2) - d.y1 >= kMinSide;
}

std::vector<std::pair<std::size_t, std::size_t>> Tracker::associate(const std::vector<std::size_t>& rows,
                                                                    const std::vector<std::size_t>& cols,
                                                                    std::span<const kernels::Detection> boxes,
                                                                    float min_iou, bool fuse) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  if (rows.empty() || cols.empty()) return out;
  constexpr double forbidden = std::numeric_limits<double>::infinity();
  std::vector<double> cost(rows.size() * cols.size(), forbidden);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Track& t = tracks_[rows[r]];
    const Corners c = corners(t.kf.mean());
    for (std::size_t k = 0; k < cols.size(); ++k) {
      const kernels::Detection& d = boxes[cols[k]];
      if (p_.per_class && d.class_id != t.last.class_id) continue;
      const double similarity = iou(c, d) * (fuse ? static_cast<double>(d.score) : 1.0);
      cost[r * cols.size() + k] = 1.0 - similarity;
    }
  }
  for (const auto& [r, k] : match_below(cost, static_cast<int>(rows.size()), static_cast<int>(cols.size()),
                                        1.0 - static_cast<double>(min_iou)))
    out.emplace_back(rows[static_cast<std::size_t>(r)], cols[static_cast<std::size_t>(k)]);
  return out;
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
  std::vector<std::size_t> high, low;
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    if (!trackable(boxes[i])) continue;
    if (boxes[i].score >= p_.high_threshold) high.push_back(i);
    else if (boxes[i].score >= p_.low_threshold) low.push_back(i);
  }
  const auto by_score = [&](std::size_t a, std::size_t b) {
    return boxes[a].score != boxes[b].score ? boxes[a].score > boxes[b].score : a < b;
  };
  std::sort(high.begin(), high.end(), by_score);
  std::sort(low.begin(), low.end(), by_score);

  std::vector<std::size_t> confirmed, tentative;
  for (std::size_t t = 0; t < tracks_.size(); ++t) {
    tracks_[t].kf.predict(tracks_[t].state == State::lost);
    (tracks_[t].state == State::tentative ? tentative : confirmed).push_back(t);
  }
  std::vector<char> box_used(boxes.size(), 0), track_used(tracks_.size(), 0);
  const auto apply = [&](const std::vector<std::pair<std::size_t, std::size_t>>& pairs) {
    for (const auto& [t, b] : pairs) {
      take(tracks_[t], boxes, b);
      track_used[t] = 1;
      box_used[b] = 1;
    }
  };
  const auto unused = [](const std::vector<std::size_t>& from, const std::vector<char>& used) {
    std::vector<std::size_t> out;
    for (const std::size_t x : from)
      if (!used[x]) out.push_back(x);
    return out;
  };

  // 2. confirmed tracks x high boxes; 3. tracked ones left x low boxes.
  apply(associate(confirmed, high, boxes, p_.match_iou, p_.fuse_score));
  std::vector<std::size_t> tracked_left;
  for (const std::size_t t : confirmed)
    if (!track_used[t] && tracks_[t].state == State::tracked) tracked_left.push_back(t);
  apply(associate(tracked_left, low, boxes, p_.low_match_iou, false));
  for (const std::size_t t : tracked_left)
    if (!track_used[t]) tracks_[t].state = State::lost;

  // 4. tentative tracks x high boxes left.
  const std::vector<std::size_t> high_left = unused(high, box_used);
  apply(associate(tentative, high_left, boxes, p_.tentative_match_iou, p_.fuse_score));
  for (const std::size_t t : tentative)
    if (track_used[t] && tracks_[t].hits >= p_.min_hits) confirm(tracks_[t], events);

  // 6. (before 5, so that the count of tracks frees room) ends of unmatched tentative and long-lost tracks.
  std::vector<Track> kept;
  kept.reserve(tracks_.size());
  std::vector<kernels::Detection> lost;
  for (std::size_t t = 0; t < tracks_.size(); ++t) {
    Track& tr = tracks_[t];
    if (tr.state == State::tentative && !track_used[t]) continue;
    if (tr.state == State::lost && frame_ - tr.last_frame > static_cast<std::uint64_t>(p_.track_buffer)) {
      kernels::Detection e = tr.last;
      e.track_id = tr.id;
      e.reserved = static_cast<std::int32_t>(kernels::TrackEvent::track_lost);
      lost.push_back(e);
      continue;
    }
    kept.push_back(std::move(tr));
  }
  tracks_ = std::move(kept);

  // 5. new tracks from the high boxes nobody took.
  for (const std::size_t b : high) {
    if (box_used[b] || boxes[b].score < p_.new_threshold) continue;
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
  std::sort(lost.begin(), lost.end(), [](const auto& a, const auto& b) { return a.track_id < b.track_id; });
  events.insert(events.end(), lost.begin(), lost.end());
}

}  // namespace sluice::track
