#include "tests/track_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace sluice::track::reference {

// kalman.cpp
namespace {

constexpr double kWeightPosition = 1.0 / 20, kWeightVelocity = 1.0 / 160;

// Standard deviations per coordinate for a box of height h: cx, cy, h scale with h, the aspect is fixed.
void position_std(double h, double (&s)[4], double aspect_std) {
  s[0] = kWeightPosition * h, s[1] = kWeightPosition * h, s[2] = aspect_std, s[3] = kWeightPosition * h;
}

}  // namespace

Kalman::Kalman(const Box& z) {
  const double at[4] = {z.cx, z.cy, z.aspect, z.h};
  const double sp[4] = {2 * kWeightPosition * z.h, 2 * kWeightPosition * z.h, 1e-2, 2 * kWeightPosition * z.h};
  const double sv[4] = {10 * kWeightVelocity * z.h, 10 * kWeightVelocity * z.h, 1e-5, 10 * kWeightVelocity * z.h};
  for (int k = 0; k < 4; ++k) {
    x_[k] = at[k], v_[k] = 0;
    ppp_[k] = sp[k] * sp[k], ppv_[k] = 0, pvv_[k] = sv[k] * sv[k];
  }
}

void Kalman::predict(bool freeze_height) {
  if (freeze_height) v_[3] = 0;
  double sp[4];
  position_std(x_[3], sp, 1e-2);
  const double sv[4] = {kWeightVelocity * x_[3], kWeightVelocity * x_[3], 1e-5, kWeightVelocity * x_[3]};
  for (int k = 0; k < 4; ++k) {
    x_[k] += v_[k];
    // P = F P F^T + Q with F = [[1, 1], [0, 1]].
    const double pp = ppp_[k] + 2 * ppv_[k] + pvv_[k], pv = ppv_[k] + pvv_[k];
    ppp_[k] = pp + sp[k] * sp[k];
    ppv_[k] = pv;
    pvv_[k] += sv[k] * sv[k];
  }
}

void Kalman::update(const Box& z) {
  double sr[4];
  position_std(x_[3], sr, 1e-1);  // measurement noise (ByteTrack's project())
  const double at[4] = {z.cx, z.cy, z.aspect, z.h};
  for (int k = 0; k < 4; ++k) {
    const double s = ppp_[k] + sr[k] * sr[k];  // innovation variance
    const double kp = ppp_[k] / s, kv = ppv_[k] / s;  // gain
    const double innovation = at[k] - x_[k];
    x_[k] += kp * innovation;
    v_[k] += kv * innovation;
    // P = (I - K H) P
    const double pp = ppp_[k], pv = ppv_[k];
    ppp_[k] = pp - kp * pp;
    ppv_[k] = pv - kp * pv;
    pvv_[k] -= kv * pv;
  }
}

// hungarian.cpp
std::vector<int> assign_rows(const std::vector<double>& cost, int rows, int cols) {
  if (rows < 0 || cols < rows || cost.size() != static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols))
    throw std::invalid_argument("assign_rows: needs rows <= cols and rows * cols costs");
  const auto n = static_cast<std::size_t>(rows), m = static_cast<std::size_t>(cols);
  constexpr double inf = std::numeric_limits<double>::infinity();
  auto a = [&](std::size_t i, std::size_t j) { return cost[(i - 1) * m + (j - 1)]; };  // 1-based
  // u, v: potentials of rows and columns; p[j]: the row column j holds (0: none); way[j]: the column before j
  // on the augmenting path. Column 0 is the virtual start of each path.
  std::vector<double> u(n + 1, 0.0), v(m + 1, 0.0), minv(m + 1);
  std::vector<std::size_t> p(m + 1, 0), way(m + 1, 0);
  std::vector<char> used(m + 1);
  for (std::size_t i = 1; i <= n; ++i) {
    p[0] = i;
    std::size_t j0 = 0;
    std::fill(minv.begin(), minv.end(), inf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[j0] = 1;
      const std::size_t i0 = p[j0];
      double delta = inf;
      std::size_t j1 = 0;
      for (std::size_t j = 1; j <= m; ++j) {
        if (used[j]) continue;
        const double cur = a(i0, j) - u[i0] - v[j];
        if (cur < minv[j]) minv[j] = cur, way[j] = j0;
        if (minv[j] < delta) delta = minv[j], j1 = j;
      }
      if (j1 == 0) throw std::invalid_argument("assign_rows: a cost is not finite");
      for (std::size_t j = 0; j <= m; ++j) {
        if (used[j]) {
          u[p[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {  // flip the path
      const std::size_t j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<int> row_col(n, -1);
  for (std::size_t j = 1; j <= m; ++j)
    if (p[j] != 0) row_col[p[j] - 1] = static_cast<int>(j - 1);
  return row_col;
}

namespace {

struct Parts {  // union-find over rows 0..R-1 and columns R..R+C-1
  std::vector<int> parent;
  explicit Parts(int n) : parent(static_cast<std::size_t>(n)) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) {
    while (parent[static_cast<std::size_t>(x)] != x) {
      parent[static_cast<std::size_t>(x)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(x)])];
      x = parent[static_cast<std::size_t>(x)];
    }
    return x;
  }
  void join(int a, int b) {
    a = find(a), b = find(b);
    if (a != b) parent[static_cast<std::size_t>(std::max(a, b))] = std::min(a, b);
  }
};

}  // namespace

std::vector<std::pair<int, int>> match_below(const std::vector<double>& cost, int rows, int cols, double limit) {
  if (rows < 0 || cols < 0 || cost.size() != static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols))
    throw std::invalid_argument("match_below: needs rows * cols costs");
  std::vector<std::pair<int, int>> pairs;
  if (!std::isfinite(limit)) return pairs;
  const auto at = [&](int r, int c) { return cost[static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)]; };
  // Allowed: below the limit, and cost - limit is a finite number.
  const auto allowed = [&](int r, int c) {
    const double x = at(r, c);
    return x < limit && std::isfinite(x - limit);
  };
  Parts parts(rows + cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      if (allowed(r, c)) parts.join(r, rows + c);
  std::vector<int> degree(static_cast<std::size_t>(rows + cols), 0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      if (allowed(r, c)) ++degree[static_cast<std::size_t>(r)], ++degree[static_cast<std::size_t>(rows + c)];
  // Each part with an allowed pair, in the order of its lowest member.
  std::vector<int> roots;
  for (int x = 0; x < rows + cols; ++x)
    if (degree[static_cast<std::size_t>(x)] > 0 && parts.find(x) == x) roots.push_back(x);
  for (const int root : roots) {
    std::vector<int> rs, cs;
    for (int r = 0; r < rows; ++r)
      if (degree[static_cast<std::size_t>(r)] > 0 && parts.find(r) == root) rs.push_back(r);
    for (int c = 0; c < cols; ++c)
      if (degree[static_cast<std::size_t>(rows + c)] > 0 && parts.find(rows + c) == root) cs.push_back(c);
    // The square matrix of lapjv's extend_cost, shifted by -limit: real pairs cost - limit (< 0), a row or a
    // column left alone 0 (its dummy partner), dummy to dummy 0, anything else `big`, more than all real gains
    // together, so that no optimum uses it (leaving everything alone, total 0, is always possible).
    const std::size_t nr = rs.size(), nc = cs.size(), n = nr + nc;
    double gains = 0;
    for (const int r : rs)
      for (const int c : cs)
        if (allowed(r, c)) gains += limit - at(r, c);
    const double big = gains + 1.0;
    std::vector<double> square(n * n, big);
    for (std::size_t i = 0; i < nr; ++i) {
      for (std::size_t j = 0; j < nc; ++j)
        if (allowed(rs[i], cs[j])) square[i * n + j] = at(rs[i], cs[j]) - limit;
      square[i * n + nc + i] = 0;
    }
    for (std::size_t j = 0; j < nc; ++j) {
      square[(nr + j) * n + j] = 0;
      for (std::size_t k = 0; k < nr; ++k) square[(nr + j) * n + nc + k] = 0;
    }
    const std::vector<int> chosen = assign_rows(square, static_cast<int>(n), static_cast<int>(n));
    for (std::size_t i = 0; i < nr; ++i) {
      const auto j = static_cast<std::size_t>(chosen[i]);
      if (j < nc && allowed(rs[i], cs[j])) pairs.emplace_back(rs[i], cs[j]);
    }
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

// tracker.cpp
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

}  // namespace sluice::track::reference
