#pragma once
// Multi-object tracking of one video (one input of one source): ByteTrack's two-stage association with the
// Kalman filter of kalman.hpp and exact IoU matching (hungarian.hpp). Deterministic: no randomness, boxes taken
// by score (descending) then index, tracks in creation order; the same frames give the same ids.
//
// Per frame:
//   1. every track predicts one frame ahead;
//   2. confirmed tracks (tracked or lost) are matched to the high boxes (score >= high_threshold) on
//      IoU (times the box's score with fuse_score) above match_iou;
//   3. tracked ones still unmatched are matched to the low boxes (low_threshold <= score < high) on IoU above
//      low_match_iou: a box whose score dropped (occlusion, blur) keeps its track; still unmatched: lost;
//   4. tentative tracks are matched to the high boxes left on IoU above tentative_match_iou; a tentative track
//      matched min_hits frames in a row is confirmed and gets its id (event "new"); unmatched, it is dropped;
//   5. a high box left with score >= new_threshold starts a tentative track (confirmed at once when
//      min_hits is 1), unless the video has max_tracks tracks already;
//   6. a lost track not matched for track_buffer frames ends (event "lost"); its id does not come back.
// Ids count from 1 per video; only confirmed tracks' boxes carry one (others keep track_id -1).
// Cost per frame: IoU only for the pairs whose boxes overlap (overlap.hpp), exact matching per cluster of
// overlapping boxes (hungarian.hpp: sparse where the cluster's costs are distinct, e.g. the large clusters of
// large boxes), scratch memory kept from frame to frame; the ids and events are those of the
// dense formulation (every track x every box, one square assignment per cluster in index order), which
// tests/track_reference.hpp keeps and tests/test_track.cpp compares against.
// Hostile boxes: a box with a coordinate or score that is not finite, a coordinate beyond +-kMaxCoordinate,
// x2 - x1 or y2 - y1 below kMinSide (so also x1 > x2) is not tracked: it keeps track_id -1 and touches no track.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/detect.hpp"
#include "stages/track/hungarian.hpp"
#include "stages/track/kalman.hpp"
#include "stages/track/overlap.hpp"

namespace sluice::track {

constexpr float kMaxCoordinate = 1e7f;  // pixels
constexpr float kMinSide = 1e-3f;       // pixels

struct TrackerParams {
  float high_threshold = 0.5f;
  float low_threshold = 0.1f;
  float new_threshold = 0.6f;
  float match_iou = 0.2f;
  float low_match_iou = 0.5f;
  float tentative_match_iou = 0.3f;
  bool fuse_score = true;
  int track_buffer = 30;
  int min_hits = 2;
  int max_tracks = 2048;
  bool per_class = false;
};

// True when `d` is a box the tracker takes (see above).
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
  // score when `fuse`) below 1 - min_iou, and takes each matched box into its track.
  void associate(std::span<const std::size_t> rows, std::span<const std::size_t> cols,
                 std::span<const kernels::Detection> boxes, float min_iou, bool fuse);
  void take(Track& t, std::span<const kernels::Detection> boxes, std::size_t b);
  void confirm(Track& t, std::vector<kernels::Detection>& events);
  // Sorts box indices by score (descending), then index; scores are finite (trackable boxes), indices below 2^32
  // (a frame's boxes are counted in an int).
  void sort_by_score(std::vector<std::size_t>& list, std::span<const kernels::Detection> boxes);

  TrackerParams p_;
  std::vector<Track> tracks_;  // in creation order
  std::uint64_t frame_ = 0;
  std::int32_t next_id_ = 1;
  // Scratch, kept so that a frame allocates nothing once the sizes have settled.
  std::vector<std::size_t> high_, low_, confirmed_, tentative_, left_;
  std::vector<std::uint64_t> score_keys_;
  std::vector<char> box_used_, track_used_;
  std::vector<Corners> predicted_;  // per track, after predict()
  OverlapSearch overlaps_;
  std::vector<int> near_;
  std::vector<Candidate> candidates_;
  Matcher matcher_;
  std::vector<kernels::Detection> lost_;
};

}  // namespace sluice::track
