#pragma once
// Synthetic detector output for the tracker's tests and bench/track_bench.cpp: objects moving at constant
// velocity with noise (bouncing off the frame's edges, so paths cross), missed detections, scores dropping into
// the low band (occlusion), births and deaths, detections at random (churn), false positives, exact duplicates and quantised scores (ties for
// the assignment and the score order), and hostile boxes (NaN, infinite, huge, inverted).
#include <cstdint>
#include <vector>

#include "kernels/detect.hpp"

namespace sluice::test {

struct SceneParams {
  int objects = 100;         // objects in view at any time
  int frames = 100;
  float width = 1920, height = 1080;
  float min_side = 20, max_side = 200;  // pixels
  float max_speed = 6;       // pixels per frame
  float noise = 2;           // standard deviation of each corner, pixels
  float missed = 0.05f;      // chance an object is not detected in a frame
  float low_score = 0.1f;    // chance its score falls into [0.1, 0.5) (occlusion, blur)
  float turnover = 0.01f;    // chance per frame an object leaves and another enters
  float false_positives = 0.05f;  // per object per frame, random boxes of random score
  float duplicates = 0;      // chance a detection comes twice, bit for bit
  float quantised = 0;       // chance a frame's scores are rounded to 0.05 (ties in the score order)
  float hostile = 0;         // chance per frame of a hostile box
  bool crowd = false;        // objects packed in a quarter of the frame (large clusters of overlaps)
  // Chance per object per frame that its detection is a box at a random place and size instead (anywhere in the
  // frame, sides min_side..churn_side, score uniform in [0.05, 1)): a detector that sees noise, e.g. one with
  // random weights. At 1 nothing persists from frame to frame: every frame starts tracks that are dropped or
  // go lost and pile up for track_buffer frames, the tracker's worst case.
  float churn = 0;
  float churn_side = 400;    // pixels
};

// Frame by frame, in a shuffled order. The same parameters and seed give the same frames.
std::vector<std::vector<kernels::Detection>> make_scene(const SceneParams& p, std::uint32_t seed);

}  // namespace sluice::test
