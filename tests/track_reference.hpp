#pragma once
// Test-only: the track stage's tracker as it was before the fleet-scale rewrite (issue 29), kept verbatim
// (tracker, Kalman filter, assignment) in its own namespace, so that tests and bench/track_bench.cpp can check
// that the tracker of stages/track/ gives the same ids and events, and measure what it gained.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kernels/detect.hpp"
#include "stages/track/tracker.hpp"

namespace sluice::track::reference {

class Kalman {
 public:
  // A new track at `z` (velocities 0, ByteTrack's initial uncertainty).
  explicit Kalman(const Box& z);
  // One frame ahead. `freeze_height`: a lost track keeps its height (ByteTrack zeroes vh when not tracked).
  void predict(bool freeze_height);
  // Corrects with a measured box.
  void update(const Box& z);
  Box mean() const { return {x_[0], x_[1], x_[2], x_[3]}; }
  double velocity(int k) const { return v_[k]; }

 private:
  double x_[4], v_[4];               // position and velocity per coordinate
  double ppp_[4], ppv_[4], pvv_[4];  // the 2x2 covariance blocks: var(x), cov(x, v), var(v)
};

// `cost` is rows x cols, row-major, every entry finite, rows <= cols. Returns for each row its column: every
// row gets a distinct column and the sum of the chosen costs is minimal. Deterministic: the same matrix gives
// the same answer (among equal-cost answers, the one the fixed scan order reaches first).
std::vector<int> assign_rows(const std::vector<double>& cost, int rows, int cols);

// Partial matching with a cost limit (what lap.lapjv(extend_cost=True, cost_limit=limit) gives ByteTrack):
// a pair (r, c) may be matched only when cost < limit (an entry >= limit, NaN or infinite is forbidden); each
// row and column is matched at most once; the matching minimises the sum over matched pairs of (cost - limit),
// i.e. every pair is worth matching and the total is as low as it can be. Rows and columns that share no
// allowed pair are solved separately (connected parts of the bipartite graph), so the cubic cost is paid per
// cluster of overlapping boxes, not for the whole frame. Returns the pairs sorted by row.
std::vector<std::pair<int, int>> match_below(const std::vector<double>& cost, int rows, int cols, double limit);

// True when `d` is a box the tracker takes (the rules of stages/track/tracker.hpp).
bool trackable(const kernels::Detection& d) noexcept;

class Tracker {
 public:
  explicit Tracker(const TrackerParams& p) : p_(p) {}
  // One frame: sets track_id on each of `boxes` (-1 where no confirmed track has it) and appends the frame's
  // events to `events` (each a box with track_id set and `reserved` = kernels::TrackEvent: "new" ones with the
  // box that confirmed the track, in confirmation order, then "lost" ones with the track's last box, in id order).
  // At most boxes.size() events of each kind.
  void update(std::span<kernels::Detection> boxes, std::vector<kernels::Detection>& events);
  std::size_t tracks() const { return tracks_.size(); }  // tentative, tracked and lost
  std::uint64_t frames() const { return frame_; }

 private:
  enum class State : std::uint8_t { tentative, tracked, lost };
  struct Track {
    Kalman kf;
    State state = State::tentative;
    std::int32_t id = -1;  // set on confirmation
    int hits = 0;
    std::uint64_t last_frame = 0;
    kernels::Detection last{};
    std::size_t box = 0;  // the index of `last` in its frame
  };
  // Matches tracks `rows` to boxes `cols` (indices into tracks_ and the frame's boxes) on 1 - IoU (times the
  // score when `fuse`) below 1 - min_iou; returns the pairs as (track, box) indices.
  std::vector<std::pair<std::size_t, std::size_t>> associate(const std::vector<std::size_t>& rows,
                                                             const std::vector<std::size_t>& cols,
                                                             std::span<const kernels::Detection> boxes,
                                                             float min_iou, bool fuse) const;
  void take(Track& t, std::span<const kernels::Detection> boxes, std::size_t b);
  void confirm(Track& t, std::vector<kernels::Detection>& events);

  TrackerParams p_;
  std::vector<Track> tracks_;  // in creation order
  std::uint64_t frame_ = 0;
  std::int32_t next_id_ = 1;
};

}  // namespace sluice::track::reference
