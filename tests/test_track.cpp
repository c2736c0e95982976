// The tracker (stages/track/): exact assignment against brute force, the ByteTrack association on synthetic
// moving boxes, hostile boxes, and the track stage on hand-made batches (per-video state, its end).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>

#include "stages/track/hungarian.hpp"
#include "stages/track/kalman.hpp"
#include "stages/track/overlap.hpp"
#include "stages/track/tracker.hpp"
#include "tests/track_reference.hpp"
#include "tests/track_scenes.hpp"
#include "tests/track_stage_rig.hpp"

using namespace sluice;
using namespace sluice::track;
using kernels::Detection;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The lowest sum of a full row assignment, trying every injective map rows -> cols.
double brute_assign(const std::vector<double>& c, int rows, int cols) {
  std::vector<int> perm(static_cast<std::size_t>(cols));
  for (int j = 0; j < cols; ++j) perm[static_cast<std::size_t>(j)] = j;
  double best = kInf;
  do {
    double s = 0;
    for (int i = 0; i < rows; ++i) s += c[static_cast<std::size_t>(i * cols + perm[static_cast<std::size_t>(i)])];
    best = std::min(best, s);
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

// The lowest sum of (cost - limit) over partial matchings of allowed pairs (cost < limit), by recursion.
double brute_match(const std::vector<double>& c, int rows, int cols, double limit) {
  std::vector<char> used(static_cast<std::size_t>(cols), 0);
  std::function<double(int)> go = [&](int r) -> double {
    if (r == rows) return 0;
    double best = go(r + 1);  // row r alone
    for (int j = 0; j < cols; ++j) {
      const double x = c[static_cast<std::size_t>(r * cols + j)];
      if (used[static_cast<std::size_t>(j)] || !(x < limit)) continue;
      used[static_cast<std::size_t>(j)] = 1;
      best = std::min(best, x - limit + go(r + 1));
      used[static_cast<std::size_t>(j)] = 0;
    }
    return best;
  };
  return go(0);
}

Detection box(float x, float y, float w, float h, float score = 0.9f, int cls = 0) {
  return {x, y, x + w, y + h, score, cls, -1, 0};
}

struct Frame {
  std::vector<Detection> boxes;
  std::vector<Detection> events;
};

// Runs `frames` (lists of boxes) through one tracker; returns each frame's boxes with ids and its events.
std::vector<Frame> run(const TrackerParams& p, std::vector<std::vector<Detection>> frames) {
  Tracker t(p);
  std::vector<Frame> out;
  for (auto& boxes : frames) {
    Frame f{boxes, {}};
    t.update(f.boxes, f.events);
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<std::int32_t> events_of(const Frame& f, kernels::TrackEvent kind) {
  std::vector<std::int32_t> ids;
  for (const Detection& e : f.events)
    if (e.reserved == static_cast<std::int32_t>(kind)) ids.push_back(e.track_id);
  return ids;
}

// Every pair of a dense rows x cols matrix as candidates, in order.
std::vector<Candidate> all_pairs(const std::vector<double>& c, int rows, int cols) {
  std::vector<Candidate> out;
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < cols; ++k) out.push_back({r, k, c[static_cast<std::size_t>(r * cols + k)]});
  return out;
}

// Runs the tracker and the reference tracker over the same frames and requires the same boxes (ids), events and
// track counts frame by frame; `on_frame(boxes, events, tracks)` then sees the tracker's side of each frame.
template <class OnFrame>
void require_same_as_reference(const TrackerParams& p, const std::vector<std::vector<Detection>>& frames,
                               OnFrame on_frame) {
  Tracker fast(p);
  reference::Tracker slow(p);
  std::vector<Detection> fast_events, slow_events;
  for (std::size_t f = 0; f < frames.size(); ++f) {
    CAPTURE(f);
    std::vector<Detection> a = frames[f], b = frames[f];
    fast_events.clear();
    slow_events.clear();
    fast.update(a, fast_events);
    slow.update(b, slow_events);
    REQUIRE(fast_events.size() == slow_events.size());
    REQUIRE((a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(Detection)) == 0));
    REQUIRE((fast_events.empty() ||
             std::memcmp(fast_events.data(), slow_events.data(), fast_events.size() * sizeof(Detection)) == 0));
    REQUIRE(fast.tracks() == slow.tracks());
    on_frame(a, fast_events, fast.tracks());
  }
}

}  // namespace

TEST_CASE("assign_rows finds the minimum of brute force on random matrices, ties included", "[track]") {
  std::mt19937 rng(7);
  for (int round = 0; round < 400; ++round) {
    const int rows = std::uniform_int_distribution<int>(0, 5)(rng);
    const int cols = std::uniform_int_distribution<int>(rows, 6)(rng);
    const bool ties = round % 2 == 0;  // small integers: many equal optima
    std::vector<double> c(static_cast<std::size_t>(rows * cols));
    for (double& x : c)
      x = ties ? std::uniform_int_distribution<int>(0, 3)(rng) : std::uniform_real_distribution<double>(-5, 5)(rng);
    CAPTURE(round, rows, cols, c);
    Matcher m;
    const std::vector<int> a = m.assign_rows(c, rows, cols);
    REQUIRE(a.size() == static_cast<std::size_t>(rows));
    std::vector<int> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
    double sum = 0;
    for (int i = 0; i < rows; ++i) {
      REQUIRE(a[static_cast<std::size_t>(i)] >= 0);
      REQUIRE(a[static_cast<std::size_t>(i)] < cols);
      sum += c[static_cast<std::size_t>(i * cols + a[static_cast<std::size_t>(i)])];
    }
    CHECK(sum == Approx(rows ? brute_assign(c, rows, cols) : 0.0).margin(1e-9));
    CHECK(Matcher().assign_rows(c, rows, cols) == a);  // deterministic
  }
  Matcher m;
  CHECK_THROWS_AS(m.assign_rows(std::vector<double>{1, 2}, 2, 1), std::invalid_argument);
  CHECK_THROWS_AS(m.assign_rows(std::vector<double>{kInf, kInf}, 1, 2), std::invalid_argument);  // no finite cost
}

TEST_CASE("match_below finds the best partial matching of brute force: rectangular, ties, forbidden pairs",
          "[track]") {
  std::mt19937 rng(11);
  const double limit = 0.8;
  Matcher m;  // one matcher for every round: its scratch memory carries nothing from one call to the next
  for (int round = 0; round < 600; ++round) {
    const int rows = std::uniform_int_distribution<int>(0, 6)(rng);
    const int cols = std::uniform_int_distribution<int>(0, 6)(rng);
    std::vector<double> c(static_cast<std::size_t>(rows * cols));
    for (double& x : c) {
      switch (std::uniform_int_distribution<int>(0, 7)(rng)) {
        case 0: x = kInf; break;
        case 1: x = std::numeric_limits<double>::quiet_NaN(); break;
        case 2: x = limit; break;  // exactly at the limit: forbidden
        case 3: x = std::uniform_int_distribution<int>(0, 3)(rng) * 0.25; break;  // ties
        default: x = std::uniform_real_distribution<double>(0, 1.2)(rng);
      }
    }
    CAPTURE(round, rows, cols, c);
    const auto pairs = m.match_below(all_pairs(c, rows, cols), rows, cols, limit);
    std::vector<char> row_used(static_cast<std::size_t>(rows), 0), col_used(static_cast<std::size_t>(cols), 0);
    double sum = 0;
    for (const auto& [r, k] : pairs) {
      REQUIRE(r >= 0);
      REQUIRE(r < rows);
      REQUIRE(k >= 0);
      REQUIRE(k < cols);
      CHECK(!row_used[static_cast<std::size_t>(r)]);
      CHECK(!col_used[static_cast<std::size_t>(k)]);
      row_used[static_cast<std::size_t>(r)] = col_used[static_cast<std::size_t>(k)] = 1;
      const double x = c[static_cast<std::size_t>(r * cols + k)];
      REQUIRE(x < limit);  // never a forbidden pair
      sum += x - limit;
    }
    CHECK(std::is_sorted(pairs.begin(), pairs.end()));
    CHECK(sum == Approx(brute_match(c, rows, cols, limit)).margin(1e-9));
    CHECK(Matcher().match_below(all_pairs(c, rows, cols), rows, cols, limit) == pairs);
    // The same pairs as the dense solver of the reference (ties broken alike), also when only some pairs are
    // listed: leaving out pairs at or above the limit changes nothing.
    CHECK(pairs == reference::match_below(c, rows, cols, limit));
    std::vector<Candidate> some;
    for (const Candidate& e : all_pairs(c, rows, cols))
      if (e.cost < limit) some.push_back(e);
    CHECK(m.match_below(some, rows, cols, limit) == pairs);
  }
  CHECK(m.match_below(std::vector<Candidate>{{0, 0, 0.1}}, 1, 1, kInf).empty());  // a limit that is not a number
  CHECK(m.match_below({}, 0, 3, 0.5).empty());
  // Candidates out of order, repeated or outside rows x cols are refused.
  CHECK_THROWS_AS(m.match_below(std::vector<Candidate>{{0, 1, 0.1}, {0, 0, 0.1}}, 1, 2, 0.5), std::invalid_argument);
  CHECK_THROWS_AS(m.match_below(std::vector<Candidate>{{0, 0, 0.1}, {0, 0, 0.1}}, 1, 2, 0.5), std::invalid_argument);
  CHECK_THROWS_AS(m.match_below(std::vector<Candidate>{{1, 0, 0.1}}, 1, 2, 0.5), std::invalid_argument);
  CHECK_THROWS_AS(m.match_below(std::vector<Candidate>{{0, -1, 0.1}}, 1, 2, 0.5), std::invalid_argument);
}

TEST_CASE("match_below gives the dense reference's pairs on large clusters with ties", "[track]") {
  std::mt19937 rng(13);
  Matcher m;
  for (int round = 0; round < 60; ++round) {
    const int rows = std::uniform_int_distribution<int>(1, 40)(rng);
    const int cols = std::uniform_int_distribution<int>(1, 40)(rng);
    const double limit = 0.8;
    std::vector<double> c(static_cast<std::size_t>(rows * cols));
    const bool ties = round % 2 == 0;
    for (double& x : c)
      x = std::uniform_int_distribution<int>(0, 2)(rng) == 0
              ? 1.0
              : (ties ? std::uniform_int_distribution<int>(1, 4)(rng) * 0.2 : std::uniform_real_distribution<double>(0, 1)(rng));
    CAPTURE(round, rows, cols);
    CHECK(m.match_below(all_pairs(c, rows, cols), rows, cols, limit) == reference::match_below(c, rows, cols, limit));
  }
}

TEST_CASE("match_below gives the dense reference's pairs on large sparse clusters of distinct costs", "[track]") {
  // What large boxes give (a detector that sees noise): one part of ~100 tracks x ~100 boxes with a few allowed
  // pairs per row, solved by shortest augmenting paths over the allowed pairs (match_sparse) against the
  // reference's square assignment.
  std::mt19937 rng(17);
  Matcher m;
  for (int round = 0; round < 80; ++round) {
    const int rows = std::uniform_int_distribution<int>(1, 120)(rng);
    const int cols = std::uniform_int_distribution<int>(1, 120)(rng);
    const double density = std::uniform_real_distribution<double>(0.02, 0.3)(rng);
    const double limit = round % 2 ? 0.8 : 0.5;
    std::vector<double> c(static_cast<std::size_t>(rows * cols));
    for (double& x : c)
      x = std::uniform_real_distribution<double>(0, 1)(rng) < density ? std::uniform_real_distribution<double>(0, limit)(rng)
                                                                       : 1.0;
    CAPTURE(round, rows, cols, density);
    const auto pairs = m.match_below(all_pairs(c, rows, cols), rows, cols, limit);
    CHECK(pairs == reference::match_below(c, rows, cols, limit));
  }
}

TEST_CASE("the overlap search finds exactly the boxes of positive intersection, as a scan of every box does",
          "[track]") {
  // Clusters, equal x1s, one box much wider than the rest, whole-pixel and extreme coordinates, and queries
  // beyond the boxes on either side or with NaN corners.
  std::mt19937 rng(29);
  const auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  OverlapSearch search;
  std::vector<int> scratch, found, want;
  for (int round = 0; round < 300; ++round) {
    std::vector<Detection> boxes;
    const int n = std::uniform_int_distribution<int>(0, 60)(rng);
    const double extent = round % 5 == 0 ? 1e7 : 2000;
    for (int i = 0; i < n; ++i) {
      float x1 = static_cast<float>(uniform(-extent, extent)), y1 = static_cast<float>(uniform(-extent, extent));
      if (i % 7 == 3 && !boxes.empty()) x1 = boxes.back().x1;  // the same x1 as another box
      if (round % 3 == 0) x1 = std::round(x1), y1 = std::round(y1);
      const float w = static_cast<float>(i == 0 && round % 2 ? uniform(500, 3000) : uniform(1, 200));
      boxes.push_back({x1, y1, x1 + w, y1 + static_cast<float>(uniform(1, 300)), 0.9f, 0, -1, 0});
    }
    std::vector<std::size_t> cols;
    for (std::size_t i = 0; i < boxes.size(); ++i)
      if (i % 4 != 1) cols.push_back(i);  // a subset, in an order of its own
    std::shuffle(cols.begin(), cols.end(), rng);
    search.index(boxes, cols);
    for (int q = 0; q < 40; ++q) {
      const double x1 = uniform(-1.2 * extent, 1.2 * extent), y1 = uniform(-1.2 * extent, 1.2 * extent);
      Corners a{x1, y1, x1 + uniform(0.5, 400), y1 + uniform(0.5, 400)};
      if (q == 0) a.x1 = std::numeric_limits<double>::quiet_NaN();
      if (q == 1) a = {-kInf, -kInf, kInf, kInf};
      const std::span<const int> near = search.overlapping(a, scratch);
      found.assign(near.begin(), near.end());
      want.clear();
      for (std::size_t k = 0; k < cols.size(); ++k) {
        const Detection& d = boxes[cols[k]];
        if (a.x1 < a.x2 && a.y1 < a.y2 && d.x1 < a.x2 && d.x2 > a.x1 && d.y1 < a.y2 && d.y2 > a.y1)
          want.push_back(static_cast<int>(k));
      }
      INFO("round " << round << " query " << q);
      REQUIRE(found == want);
    }
  }
}

TEST_CASE("the Kalman filter follows a box moving at constant velocity", "[track]") {
  Kalman k({100, 50, 0.5, 80});
  for (int f = 1; f <= 30; ++f) {
    k.predict(false);
    k.update({100.0 + 5 * f, 50.0 - 2 * f, 0.5, 80});
  }
  k.predict(false);
  CHECK(k.mean().cx == Approx(100 + 5 * 31).margin(0.5));
  CHECK(k.mean().cy == Approx(50 - 2 * 31).margin(0.5));
  CHECK(k.velocity(0) == Approx(5).margin(0.1));
  CHECK(k.mean().h == Approx(80).margin(0.01));
}

TEST_CASE("tracker: boxes in linear motion keep their ids, a confirmed track's first frame says new", "[track]") {
  TrackerParams p;
  std::vector<std::vector<Detection>> frames;
  for (int f = 0; f < 40; ++f)
    frames.push_back({box(10.0f + 4 * f, 20, 40, 80, 0.9f), box(400.0f - 3 * f, 200, 50, 100, 0.8f),
                      box(200, 10.0f + 2 * f, 30, 30, 0.7f)});
  const auto out = run(p, frames);
  // min_hits 2: nothing on the first frame, ids and "new" on the second.
  for (const Detection& d : out[0].boxes) CHECK(d.track_id == -1);
  CHECK(out[0].events.empty());
  const std::vector<std::int32_t> ids = {out[1].boxes[0].track_id, out[1].boxes[1].track_id, out[1].boxes[2].track_id};
  CHECK(ids == std::vector<std::int32_t>{1, 2, 3});  // by score, in confirmation order
  CHECK(events_of(out[1], kernels::TrackEvent::track_new) == std::vector<std::int32_t>{1, 2, 3});
  for (std::size_t f = 2; f < out.size(); ++f) {
    CAPTURE(f);
    for (std::size_t b = 0; b < 3; ++b) CHECK(out[f].boxes[b].track_id == ids[b]);
    CHECK(out[f].events.empty());
  }
}

TEST_CASE("tracker: crossing paths keep their ids through the crossing", "[track]") {
  TrackerParams p;
  std::vector<std::vector<Detection>> frames;
  for (int f = 0; f < 60; ++f)  // they meet at f = 30 (x 250), one 20 px lower
    frames.push_back({box(10.0f + 8 * f, 100, 40, 80, 0.9f), box(490.0f - 8 * f, 120, 40, 80, 0.85f)});
  const auto out = run(p, frames);
  for (std::size_t f = 1; f < out.size(); ++f) {
    CAPTURE(f);
    CHECK(out[f].boxes[0].track_id == 1);
    CHECK(out[f].boxes[1].track_id == 2);
  }
}

TEST_CASE("tracker: an occlusion with low scores keeps the id (second association), a short gap finds it again",
          "[track]") {
  TrackerParams p;
  std::vector<std::vector<Detection>> frames;
  for (int f = 0; f < 40; ++f) {
    const float x = 10.0f + 5 * f;
    if (f >= 10 && f < 15) frames.push_back({box(x, 50, 40, 80, 0.3f)});  // occluded: a low score
    else if (f >= 25 && f < 30) frames.push_back({});                         // gone for 5 frames
    else frames.push_back({box(x, 50, 40, 80, 0.9f)});
  }
  const auto out = run(p, frames);
  for (std::size_t f = 1; f < out.size(); ++f) {
    CAPTURE(f);
    if (f >= 25 && f < 30) continue;
    REQUIRE(out[f].boxes.size() == 1);
    CHECK(out[f].boxes[0].track_id == 1);
    CHECK(out[f].events.size() == (f == 1 ? 1u : 0u));  // no new id after the gap, no lost event
  }
  // Without the second association the low boxes are not tracked.
  TrackerParams strict = p;
  strict.low_threshold = 0.5f;
  CHECK(run(strict, frames)[12].boxes[0].track_id == -1);
}

TEST_CASE("tracker: a track gone longer than the buffer ends with lost, and comes back with a new id", "[track]") {
  TrackerParams p;
  p.track_buffer = 10;
  std::vector<std::vector<Detection>> frames;
  for (int f = 0; f < 5; ++f) frames.push_back({box(100, 100, 40, 80, 0.9f)});
  for (int f = 0; f < 11; ++f) frames.push_back({});  // frames 5..15: lost at frame 5, ends at 5 + 10 + 1 = 16
  for (int f = 0; f < 4; ++f) frames.push_back({box(100, 100, 40, 80, 0.9f)});
  const auto out = run(p, frames);
  CHECK(out[4].boxes[0].track_id == 1);
  for (std::size_t f = 5; f < 15; ++f) CHECK(out[f].events.empty());
  // Frame 15 is the 11th frame without it: 15 - 4 = 11 > 10 frames since its last box.
  CHECK(events_of(out[15], kernels::TrackEvent::track_lost) == std::vector<std::int32_t>{1});
  const Detection& lost = out[15].events[0];
  CHECK(lost.x1 == 100.0f);  // its last box
  CHECK(lost.score == 0.9f);
  CHECK(out[16].boxes[0].track_id == -1);  // tentative again
  CHECK(out[17].boxes[0].track_id == 2);
  CHECK(events_of(out[17], kernels::TrackEvent::track_new) == std::vector<std::int32_t>{2});
}

TEST_CASE("tracker: min_hits, per_class, new_threshold and max_tracks", "[track]") {
  std::vector<std::vector<Detection>> frames;
  for (int f = 0; f < 5; ++f) frames.push_back({box(10.0f + f, 10, 40, 40, 0.9f, f < 3 ? 0 : 1)});
  TrackerParams p;
  p.min_hits = 1;
  auto out = run(p, frames);
  CHECK(out[0].boxes[0].track_id == 1);  // confirmed at once
  CHECK(out[4].boxes[0].track_id == 1);  // class-agnostic: the class change keeps the track
  p.min_hits = 3;
  out = run(p, frames);
  CHECK(out[1].boxes[0].track_id == -1);
  CHECK(out[2].boxes[0].track_id == 1);
  p.min_hits = 1, p.per_class = true;
  out = run(p, frames);
  CHECK(out[2].boxes[0].track_id == 1);
  CHECK(out[3].boxes[0].track_id == 2);  // another class: another track
  p = {};
  p.min_hits = 1;
  frames = {{box(10, 10, 40, 40, 0.55f)}};  // high but below new_threshold 0.6: starts nothing
  CHECK(run(p, frames)[0].boxes[0].track_id == -1);
  p.max_tracks = 2;
  frames = {{box(0, 0, 10, 10), box(100, 0, 10, 10), box(200, 0, 10, 10)}};
  out = run(p, frames);
  CHECK(out[0].boxes[0].track_id == 1);
  CHECK(out[0].boxes[1].track_id == 2);
  CHECK(out[0].boxes[2].track_id == -1);  // over max_tracks
}

TEST_CASE("tracker: the same frames give the same ids and events (deterministic)", "[track]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> pos(0, 600), size(10, 80), score(0, 1);
  std::vector<std::vector<Detection>> frames(80);
  std::vector<Detection> objects;
  for (int i = 0; i < 12; ++i) objects.push_back(box(pos(rng), pos(rng), size(rng), size(rng), score(rng)));
  for (auto& f : frames) {
    for (Detection& o : objects) {
      o.x1 += 3, o.x2 += 3;
      o.score = score(rng);
      if (o.score > 0.15f) f.push_back(o);
    }
  }
  const auto a = run({}, frames), b = run({}, frames);
  int tracked = 0, events = 0;
  for (std::size_t f = 0; f < frames.size(); ++f) {
    REQUIRE(a[f].boxes.size() == b[f].boxes.size());
    REQUIRE(a[f].events.size() == b[f].events.size());
    const auto same = [](const std::vector<Detection>& x, const std::vector<Detection>& y) {
      return x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(Detection)) == 0;
    };
    CHECK(same(a[f].boxes, b[f].boxes));
    CHECK(same(a[f].events, b[f].events));
    for (const Detection& d : a[f].boxes) tracked += d.track_id >= 0;
    events += static_cast<int>(a[f].events.size());
    CHECK(a[f].events.size() <= 2 * a[f].boxes.size() + 12);  // at most one new per box, lost per earlier box
  }
  CHECK(tracked > 0);
  CHECK(events > 0);
}

TEST_CASE("tracker: the same ids and events as the reference tracker on random scenes, frame by frame", "[track]") {
  std::size_t frames_seen = 0, boxes_tracked = 0, events_seen = 0, crowded_frames = 0;
  for (std::uint32_t seed = 0; seed < 48; ++seed) {
    test::SceneParams scene;
    scene.frames = 40;
    scene.objects = static_cast<int>(seed * 37 % 190);  // 0..200 boxes a frame with false positives
    scene.crowd = seed % 3 == 0;
    scene.max_speed = seed % 4 == 0 ? 25.0f : 6.0f;  // fast objects: predictions off, tracks lost and found
    scene.missed = seed % 5 == 0 ? 0.3f : 0.05f;     // occlusions
    scene.turnover = seed % 6 == 0 ? 0.1f : 0.01f;   // births and deaths
    scene.duplicates = static_cast<float>(seed % 4) * 0.05f;
    scene.quantised = static_cast<float>(seed % 5) * 0.2f;
    scene.hostile = 0.3f;
    TrackerParams p;
    p.min_hits = 1 + static_cast<int>(seed % 3);
    p.per_class = seed % 7 == 0;
    p.fuse_score = seed % 5 != 0;
    p.track_buffer = static_cast<int>(seed % 4) * 5;
    p.max_tracks = seed % 9 == 0 ? 20 : 2048;
    if (seed % 11 == 0) p.match_iou = -0.1f;      // outside what the stage takes: every pair a candidate
    if (seed % 13 == 0) p.low_match_iou = 0.0f;
    CAPTURE(seed);
    require_same_as_reference(p, test::make_scene(scene, seed),
                              [&](const std::vector<Detection>& boxes, const std::vector<Detection>& events, std::size_t) {
                                ++frames_seen;
                                crowded_frames += boxes.size() >= 150;
                                for (const Detection& d : boxes) boxes_tracked += d.track_id >= 0;
                                events_seen += events.size();
                              });
  }
  CHECK(frames_seen == 48 * 40);
  CHECK(boxes_tracked > 10000);  // the scenes do track things
  CHECK(events_seen > 1000);
  CHECK(crowded_frames > 100);
}

TEST_CASE("tracker: the same ids and events as the reference tracker on churn scenes and large boxes",
          "[track]") {
  // A detector that sees noise: most boxes at random places and sizes every frame, so tracks start, go lost and
  // pile up for track_buffer frames; and large objects, whose overlaps make clusters spanning the frame (the
  // tracker's worst cases).
  std::size_t frames_seen = 0, boxes_tracked = 0, events_seen = 0, most_tracks = 0;
  for (std::uint32_t seed = 0; seed < 16; ++seed) {
    test::SceneParams scene;
    scene.frames = 60;
    scene.objects = 90 + static_cast<int>(seed % 3) * 5;
    scene.churn = seed % 4 == 0 ? 1.0f : seed % 4 == 1 ? 0.9f : 0.5f;
    scene.churn_side = seed % 2 == 0 ? 1000.0f : 300.0f;
    if (seed % 3 == 2) scene.width = scene.height = 640, scene.churn_side = 400, scene.max_side = 150;
    if (seed >= 12) scene.churn = seed % 2 ? 0.2f : 0.0f, scene.max_side = 1000, scene.noise = 10;  // large objects
    scene.quantised = seed % 5 == 0 ? 0.5f : 0.0f;  // ties in the score order and the costs
    scene.duplicates = seed % 6 == 0 ? 0.1f : 0.0f;
    scene.hostile = 0.1f;
    TrackerParams p;
    p.min_hits = 1 + static_cast<int>(seed % 2);
    p.per_class = seed % 5 == 3;
    p.fuse_score = seed % 7 != 6;
    CAPTURE(seed);
    require_same_as_reference(
        p, test::make_scene(scene, 1000 + seed),
        [&](const std::vector<Detection>& boxes, const std::vector<Detection>& events, std::size_t tracks) {
          ++frames_seen;
          most_tracks = std::max(most_tracks, tracks);
          for (const Detection& d : boxes) boxes_tracked += d.track_id >= 0;
          events_seen += events.size();
        });
  }
  CHECK(frames_seen == 16 * 60);
  CHECK(boxes_tracked > 1000);
  CHECK(events_seen > 1000);
  CHECK(most_tracks > 150);  // tracks do pile up
}

TEST_CASE("tracker: hostile boxes (NaN, Inf, huge, inverted, empty) are not tracked and break nothing", "[track]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<Detection> bad = {
      {nan, 0, 10, 10, 0.9f, 0, 5, 0},   {0, 0, inf, 10, 0.9f, 0, 5, 0},     {0, 0, 10, 10, nan, 0, 5, 0},
      {0, 0, 10, 10, inf, 0, 5, 0},      {10, 0, 0, 10, 0.9f, 0, 5, 0},      {0, 10, 10, 0, 0.9f, 0, 5, 0},
      {5, 5, 5, 5, 0.9f, 0, 5, 0},       {-3e38f, 0, 3e38f, 10, 0.9f, 0, 5, 0}, {0, 0, 2e7f, 10, 0.9f, 0, 5, 0},
      {0, 0, 10, 10, -inf, 0, 5, 0},
  };
  for (const Detection& d : bad) CHECK_FALSE(trackable(d));
  TrackerParams p;
  p.min_hits = 1;
  Tracker t(p);
  for (int f = 0; f < 50; ++f) {
    std::vector<Detection> boxes = bad;
    boxes.push_back(box(100.0f + f, 100, 40, 40, 0.9f));
    std::vector<Detection> events;
    t.update(boxes, events);
    for (std::size_t i = 0; i < bad.size(); ++i) CHECK(boxes[i].track_id == -1);
    CHECK(boxes.back().track_id == 1);
  }
  CHECK(t.tracks() == 1);
}


TEST_CASE("track stage: per-video state, events after the boxes, dropped once the input is complete", "[track]") {
  test::TrackStageRig rig({{"min_hits", "1"}, {"track_buffer", "2"}});
  CHECK(rig.stage->output().channels == test::TrackStageRig::kBoxes * kernels::kTrackSlotsPerBox);
  InputTracker& inputs = rig.shared->inputs;
  const std::uint32_t a = inputs.begin(1, "a.mp4", InputKind::file, -1), b = inputs.begin(2, "cam", InputKind::file, -1);
  inputs.decoded(a, 100);
  inputs.decoded(b, 100);
  // Two sources in one batch, interleaved: each video has its own ids from 1.
  auto out = rig.process({{test::track_frame(1, a, 0), 1, {box(10, 10, 40, 40)}},
                          {test::track_frame(2, b, 0), 2, {box(300, 10, 40, 40), box(10, 10, 40, 40)}},
                          {test::track_frame(1, a, 1), 1, {box(12, 10, 40, 40)}}});
  CHECK(out[0].first.count == 1);
  CHECK(out[0].second[0].track_id == 1);
  CHECK(out[0].first.events == 1);  // new #1 after the box
  CHECK(out[0].second[1].track_id == 1);
  CHECK(out[0].second[1].reserved == static_cast<std::int32_t>(kernels::TrackEvent::track_new));
  CHECK(out[1].second[0].track_id == 1);
  CHECK(out[1].second[1].track_id == 2);  // source 2's box at source 1's place: its own track
  CHECK(out[1].first.events == 2);
  CHECK(out[2].second[0].track_id == 1);
  CHECK(out[2].first.events == 0);
  // A batch without source 1 (paused, or just not in this batch) keeps its state: the same id after it.
  out = rig.process({{test::track_frame(2, b, 1), 0, {}}});
  out = rig.process({{test::track_frame(1, a, 2), 1, {box(14, 10, 40, 40)}}});
  CHECK(out[0].second[0].track_id == 1);
  CHECK(out[0].first.events == 0);
  // Source 2 empty for 3 frames: both its tracks end (buffer 2), ids in order, last boxes.
  out = rig.process({{test::track_frame(2, b, 2), 0, {}}, {test::track_frame(2, b, 3), 0, {}}});
  CHECK(out[1].first.count == 0);
  REQUIRE(out[1].first.events == 2);
  CHECK(out[1].second[0].track_id == 1);
  CHECK(out[1].second[0].reserved == static_cast<std::int32_t>(kernels::TrackEvent::track_lost));
  CHECK(out[1].second[1].track_id == 2);
  CHECK(out[1].second[1].x1 == 10.0f);
  // Input a completes (ended, every frame settled): its state goes at the next batch; were a frame of it to come,
  // it would start again from id 1 with a new event.
  inputs.end(a);
  std::vector<FrameMeta> settled;
  for (std::uint64_t i = 0; i < 100; ++i) settled.push_back(test::track_frame(1, a, i));
  inputs.settle(settled, FrameFate::delivered);
  rig.process({{test::track_frame(2, b, 4), 0, {}}});
  out = rig.process({{test::track_frame(1, a, 3), 1, {box(200, 200, 40, 40)}}});
  CHECK(out[0].second[0].track_id == 1);
  CHECK(out[0].first.events == 1);
}

TEST_CASE("track stage: a hostile header count is bounded by the payload, hostile boxes stay untracked", "[track]") {
  test::TrackStageRig rig(std::map<std::string, std::string>{{"min_hits", "1"}});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Detection> boxes(test::TrackStageRig::kBoxes, box(10, 10, 40, 40));
  boxes[1] = {nan, nan, nan, nan, nan, 0, 77, 0};
  boxes[2] = {50, 50, 10, 10, 0.9f, 0, 77, 0};
  for (const std::int32_t count : {std::numeric_limits<std::int32_t>::max(), -5, test::TrackStageRig::kBoxes + 1, 3}) {
    CAPTURE(count);
    const auto out = rig.process({{test::track_frame(1, 0, 0), count, boxes}});
    const auto& [h, slots] = out[0];
    CHECK(h.count == std::clamp(count, 0, test::TrackStageRig::kBoxes));
    CHECK(h.events >= 0);
    CHECK(h.count + h.events <= static_cast<int>(slots.size()));
    if (h.count > 2) {
      CHECK(slots[1].track_id == -1);
      CHECK(slots[2].track_id == -1);
    }
  }
}
