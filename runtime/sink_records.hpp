#pragma once
// One record per frame, as the sinks write it: where the frame came from (source, input, index in the input),
// its sequence and time stamps, per-stage times, and what the chain produced for it (the top-k classes by
// label, or a mean/min/max summary of the payload).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/detect.hpp"
#include "kernels/topk.hpp"
#include "runtime/batch.hpp"
#include "runtime/input_tracker.hpp"

namespace sluice::sinks {

// Where a frame came from, as records and output names use it.
struct Origin {
  std::string source;  // the source's name ("source<N>" when it has none)
  std::string uri;     // the input (a file path, a camera, a URL); empty for frames without one
  std::string options;  // the input's own options (a Redis job entry's), "" when none
  bool live = false;   // the input is a camera or stream connection (not a file a job redoes)
  bool tracked = false;  // `uri` and `options` are the input's own (from the pipeline's input tracker)
};

// Names of sources and inputs from the pipeline's InputTracker, looked up once per input and kept until
// forget() (the sink calls it when it finished the input). Works without shared state (tests, old pipelines).
class Origins {
 public:
  explicit Origins(std::shared_ptr<PipelineShared> shared) : shared_(std::move(shared)) {}
  const Origin& of(const FrameMeta& f);
  void forget(std::uint32_t input) { inputs_.erase(input); }

 private:
  std::string source_name(std::uint32_t source_id) const;
  std::shared_ptr<PipelineShared> shared_;
  std::map<std::uint32_t, Origin> inputs_;   // by FrameMeta::input
  std::map<std::uint32_t, Origin> sources_;  // frames without an input, by source id
};

struct PayloadSummary {
  double mean = 0, min = 0, max = 0;
};
// Mean/min/max of one item: a cheap fingerprint of what the chain produced, for people and tests.
PayloadSummary summarise(const PayloadDesc& d, const std::byte* item);
// Classes items: the top-k entries, best first; a class's name is its label, or "class N" without labels.
std::span<const kernels::ClassScore> class_scores(const PayloadDesc& d, const std::byte* item);
std::string class_name(const PayloadDesc& d, std::int32_t index);
// Detections items: the filled boxes (header.count, bounded by the payload's capacity).
std::span<const kernels::Detection> detections(const PayloadDesc& d, const std::byte* item);
// Detections items made by the track stage: the track events after the boxes (header.events, bounded by the
// payload's capacity); each a box with track_id and `reserved` = kernels::TrackEvent.
std::span<const kernels::Detection> track_events(const PayloadDesc& d, const std::byte* item);
std::string track_event_name(std::int32_t event);  // "new", "lost", or "event N" for a value it does not know
// Detections items: attribute `a`'s top-k entries for box slot `slot` (PayloadDesc::attributes); index -1 in the
// first entry: the secondary model did not look at that box.
std::span<const kernels::ClassScore> attribute_scores(const PayloadDesc& d, const std::byte* item, std::size_t a,
                                                      std::size_t slot);
// "colour red 0.93, make vw 0.80": each attribute's best class and score for box slot `slot` ("" when none).
std::string attributes_text(const PayloadDesc& d, const std::byte* item, std::size_t slot);
// "tensor f32 nchw 3x64x96": the item's shape without the batch and memory suffix.
std::string item_shape(const PayloadDesc& d);

class RecordFormatter {
 public:
  // `stage_names` and `index`: the pipeline's stages and the sink's position (for stage_ms).
  RecordFormatter(std::vector<std::string> stage_names, int index);

  // Item `i` of `b` as one JSON object on one line (no newline):
  //   source (id), source_name, input and input_frame (frames of an input only), sequence, pts_ns,
  //   stage_ms {stage: ms from the previous stage's finish}, latency_ms (capture to `now`), and either
  //   classes [{index, label, score}, ...] best first, detections [{box [x1, y1, x2, y2] in frame pixels, class,
  //   label, score, track (once a track stage confirmed its track), attributes {name: [{index, label, score},
  //   ...]} (the classify_boxes stages that looked at it)}, ...] best first, with track_events [{event
  //   "new" | "lost", track, box, class, label, score}, ...] after a track stage on frames that have any, or
  //   payload {shape, mean, min, max}. Keys in sorted order (as nlohmann::json prints them).
  std::string json(const Batch& b, int i, const Origin& origin, std::int64_t now) const;
  // The same record appended to `out`: a sink reuses one buffer for every record.
  void append_json(const Batch& b, int i, const Origin& origin, std::int64_t now, std::string& out) const;
  // Item `i` as the stdout sink's text line (with a newline): "source NAME seq N pts ..." with the source's
  // name, as the summary and the sources view call it.
  std::string text(const Batch& b, int i, const Origin& origin, std::int64_t now) const;

 private:
  std::vector<std::string> names_;
  int index_;
  struct StageKey {
    std::string text;   // the stage's name as a JSON key, with its colon
    std::size_t stage;  // its place in names_
  };
  std::vector<StageKey> stage_keys_;  // stage_ms's keys in print order
};

}  // namespace sluice::sinks
