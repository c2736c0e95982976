// libFuzzer harness: the tracker (stages/track/tracker) on hostile detections, i.e. a model's outputs. The first
// bytes choose the parameters (raw floats for the thresholds: NaN and Inf included); the rest are frames: a count
// byte (up to 64 boxes), then that many boxes as raw bytes (coordinates, scores and classes as they come). Every
// box must come back with track_id -1 or a confirmed id >= 1 (never for a box trackable() refuses), at most one
// "new" per box and one "lost" per box of the video so far per frame, and the number of tracks within
// max_tracks. A crash, a hang or a broken promise is a finding.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz/byte_reader.hpp"
#include "stages/track/tracker.hpp"

using namespace sluice;
using namespace sluice::track;

using Reader = sluice::fuzz::ByteReader;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader r{data, size};
  TrackerParams p;
  p.high_threshold = r.number();
  p.low_threshold = r.number();
  p.new_threshold = r.number();
  p.match_iou = r.number();
  p.low_match_iou = r.number();
  p.tentative_match_iou = r.number();
  const std::uint8_t flags = r.byte();
  p.fuse_score = flags & 1;
  p.per_class = flags & 2;
  p.track_buffer = r.byte() % 16;
  p.min_hits = 1 + r.byte() % 4;
  p.max_tracks = 1 + r.byte() % 128;
  Tracker t(p);
  std::size_t seen = 0;  // boxes so far
  std::vector<kernels::Detection> boxes, events;
  while (r.at < r.size) {
    boxes.resize(r.byte() % 65);
    for (kernels::Detection& d : boxes)
      for (std::size_t k = 0; k < sizeof d; ++k) reinterpret_cast<std::uint8_t*>(&d)[k] = r.byte();
    seen += boxes.size();
    events.clear();
    t.update(boxes, events);
    std::size_t news = 0, lost = 0;
    for (const kernels::Detection& e : events) {
      if (e.track_id < 1) std::abort();
      if (e.reserved == static_cast<std::int32_t>(kernels::TrackEvent::track_new)) ++news;
      else if (e.reserved == static_cast<std::int32_t>(kernels::TrackEvent::track_lost)) ++lost;
      else std::abort();
    }
    if (news > boxes.size() || lost > seen) std::abort();
    for (const kernels::Detection& d : boxes)
      if (d.track_id < -1 || d.track_id == 0 || (d.track_id > 0 && !trackable(d))) std::abort();
    if (t.tracks() > static_cast<std::size_t>(p.max_tracks)) std::abort();
  }
  return 0;
}
