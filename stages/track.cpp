// track: multi-object tracking on the host (stages/track/tracker.hpp: ByteTrack's two-stage association, a
// Kalman motion model, exact Hungarian matching). Takes detections in host memory (after download), writes them
// again with track ids set and the frame's track events after the boxes; every frame goes on, none is dropped.
// State is kept per video: per input of each source (a file of a job, one connection of a camera), made at its
// first frame and dropped once the input is complete (ended, every frame settled), which covers a source removed
// at run time; a pause leaves it as it is. Videos are independent: a batch's frames are grouped per video and the
// groups tracked on `threads` threads (each video's frames in order on one thread), so the output is the same
// whatever the thread count.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "kernels/topk.hpp"
#include "runtime/errors.hpp"
#include "runtime/fork_join.hpp"
#include "runtime/stage_registrar.hpp"
#include "runtime/thread_name.hpp"
#include "stages/track/tracker.hpp"

namespace sluice {
namespace {

using kernels::Detection;
using kernels::DetectionsHeader;

track::TrackerParams tracker_params(const ParamValues& v) {
  track::TrackerParams p;
  p.high_threshold = static_cast<float>(v.number("high_threshold"));
  p.low_threshold = static_cast<float>(v.number("low_threshold"));
  p.new_threshold = static_cast<float>(v.number("new_threshold"));
  p.match_iou = static_cast<float>(v.number("match_iou"));
  p.low_match_iou = static_cast<float>(v.number("low_match_iou"));
  p.tentative_match_iou = static_cast<float>(v.number("tentative_match_iou"));
  p.fuse_score = v.boolean("fuse_score");
  p.track_buffer = static_cast<int>(v.integer("track_buffer"));
  p.min_hits = static_cast<int>(v.integer("min_hits"));
  p.max_tracks = static_cast<int>(v.integer("max_tracks"));
  p.per_class = v.boolean("per_class");
  return p;
}

// 0: half the cores (the other stages and the sources need theirs), at most 8.
int tracking_threads(std::int64_t given) {
  if (given > 0) return static_cast<int>(given);
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 1, 8);
}

class TrackStage final : public Stage {
 public:
  explicit TrackStage(const StageInit& init)
      : shared_(init.shared),
        params_(tracker_params(init.params)),
        crew_(tracking_threads(init.params.integer("threads")), kStageThreadName) {
    const PayloadDesc& in = *init.input;
    if (in.kind != PayloadKind::detections)
      throw ConfigError("tracks boxes: needs detections (the infer stage's output: detections), got " + in.describe());
    if (in.memory == MemoryKind::device)
      throw ConfigError("runs on the host: put it after download (its input is " + in.describe() + ")");
    const auto given = [&](const char* name) { return std::string(name) + " " + format_param(init.params.number(name)); };
    if (params_.low_threshold > params_.high_threshold)
      throw ConfigError(given("low_threshold") + " is above " + given("high_threshold"));
    if (params_.new_threshold < params_.high_threshold)
      throw ConfigError(given("new_threshold") + " is below " + given("high_threshold") + " (only high boxes start tracks)");
    boxes_ = in.channels;
    in_ = in;
    out_ = in;
    out_.channels = in.channels * kernels::kTrackSlotsPerBox;
    out_.memory = MemoryKind::host;
  }
  PayloadDesc output() const override { return out_; }

  std::string plan_note() const override {
    const auto& p = params_;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "ByteTrack per input of each source: high >= %g, low >= %g, new >= %g; IoU above %g%s (high), %g "
                  "(low), %g (tentative); lost kept %d frames; confirmed after %d hit(s); at most %d tracks; %s; "
                  "output: up to %d boxes, then up to %d track events; %d thread(s)",
                  static_cast<double>(p.high_threshold), static_cast<double>(p.low_threshold),
                  static_cast<double>(p.new_threshold), static_cast<double>(p.match_iou),
                  p.fuse_score ? " x score" : "", static_cast<double>(p.low_match_iou),
                  static_cast<double>(p.tentative_match_iou), p.track_buffer, p.min_hits, p.max_tracks,
                  p.per_class ? "per class" : "class-agnostic", boxes_, out_.channels - boxes_, crew_.threads());
    return buf;
  }

  BatchLease process(Batch* in, StageContext& ctx) override {
    BatchLease out = ctx.acquire();
    if (!out) throw StageError("output pool closed");
    ++batches_;
    // Group the batch's items per video (groups in order of first item, items in order), by counting sort.
    const auto count = static_cast<std::size_t>(std::max(in->count, 0));
    item_group_.resize(count);
    batch_videos_.clear();
    for (std::size_t i = 0; i < count; ++i) {
      const FrameMeta& f = in->frames[i];
      auto it = videos_.find({f.source_id, f.input});
      if (it == videos_.end()) it = videos_.emplace(Key{f.source_id, f.input}, Video{track::Tracker(params_)}).first;
      Video& v = it->second;
      if (v.seen_batch != batches_) {
        v.seen_batch = batches_;
        v.group = batch_videos_.size();
        batch_videos_.push_back(&v);
      }
      item_group_[i] = v.group;
    }
    group_begin_.assign(batch_videos_.size() + 1, 0);
    for (const std::size_t g : item_group_) ++group_begin_[g + 1];
    for (std::size_t g = 0; g < batch_videos_.size(); ++g) group_begin_[g + 1] += group_begin_[g];
    group_items_.resize(count);
    group_fill_.assign(batch_videos_.size(), 0);
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t g = item_group_[i];
      group_items_[group_begin_[g] + group_fill_[g]++] = static_cast<int>(i);
    }
    crew_.run(batch_videos_.size(), [&](std::size_t g) {
      for (std::size_t k = group_begin_[g]; k < group_begin_[g + 1]; ++k) track_item(*in, *out, group_items_[k], *batch_videos_[g]);
    });
    ctx.helper_cpu_ns = crew_.helpers_cpu_ns();  // the crew's CPU counts as the stage's
    forget_complete();
    return out;
  }

 private:
  using Key = std::pair<std::uint32_t, std::uint32_t>;  // source id, input
  struct Video {
    track::Tracker tracker;
    std::vector<Detection> events;  // one frame's, kept for its memory
    std::uint64_t seen_batch = 0;   // the last batch with a frame of this video
    std::size_t group = 0;          // its group in that batch
  };

  // One frame of `v`: its boxes with ids, then its events. Touches only item i of `out` and `v`, so that videos
  // can be tracked on different threads.
  void track_item(const Batch& in, Batch& out, int i, Video& v) const {
    DetectionsHeader h;
    std::memcpy(&h, in.item(i), sizeof h);
    const int n = std::clamp(h.count, 0, boxes_);  // a hostile count is bounded by the payload
    std::byte* item = out.item(i);
    auto* boxes = reinterpret_cast<Detection*>(item + sizeof h);
    std::memcpy(boxes, in.item(i) + sizeof h, sizeof(Detection) * static_cast<std::size_t>(n));
    v.events.clear();
    v.tracker.update({boxes, static_cast<std::size_t>(n)}, v.events);
    // At most n "new" and boxes_ "lost" (tracker.hpp): always room; min() only guards the layout.
    const std::size_t room = static_cast<std::size_t>(out_.channels - n);
    const std::size_t e = std::min(v.events.size(), room);
    if (e) std::memcpy(boxes + n, v.events.data(), sizeof(Detection) * e);
    h.count = n;
    h.events = static_cast<std::int32_t>(e);
    std::memcpy(item, &h, sizeof h);
    keep_attributes(in.item(i), item, n);
  }

  // What secondary models said of each box (classify_boxes before this stage) stays with it: boxes keep their
  // slots; the event slots and the rest say "not looked at".
  void keep_attributes(const std::byte* from, std::byte* to, int boxes) const {
    for (std::size_t a = 0; a < out_.attributes.size(); ++a) {
      const auto k = static_cast<std::size_t>(out_.attributes[a].k);
      const auto* src = reinterpret_cast<const kernels::ClassScore*>(from + in_.attribute_offset(a));
      auto* dst = reinterpret_cast<kernels::ClassScore*>(to + out_.attribute_offset(a));
      const std::size_t kept = static_cast<std::size_t>(boxes) * k;
      std::copy(src, src + kept, dst);
      std::fill(dst + kept, dst + static_cast<std::size_t>(out_.channels) * k, kernels::ClassScore{0.f, -1});
    }
  }

  // Drops the state of inputs that are complete (or no longer known to the input tracker): no frame of theirs
  // can come any more. Inputs of this batch are kept (their frames are not settled yet).
  void forget_complete() {
    if (!shared_) return;
    for (auto it = videos_.begin(); it != videos_.end();) {
      bool done = false;
      if (it->first.second != 0 && it->second.seen_batch != batches_) {
        const auto p = shared_->inputs.get(it->first.second);
        done = !p || p->complete;
      }
      it = done ? videos_.erase(it) : std::next(it);
    }
  }

  std::shared_ptr<PipelineShared> shared_;
  track::TrackerParams params_;
  int boxes_ = 0;
  PayloadDesc in_, out_;
  std::map<Key, Video> videos_;
  std::uint64_t batches_ = 0;
  // A batch's groups: the videos, each item's group, the items per group (group_begin_ offsets).
  std::vector<Video*> batch_videos_;
  std::vector<std::size_t> item_group_, group_begin_, group_fill_;
  std::vector<int> group_items_;
  ForkJoin crew_;
};

}  // namespace

static StageInfo track_stage() {
  StageInfo info{"track",
          StageRole::transform,
          "multi-object tracking on the host (ByteTrack: two-stage association of high and low score boxes, Kalman "
          "motion model, Hungarian IoU matching): detections in (after download), the same boxes out with track "
          "ids, and per frame the tracks that started (\"new\") and ended (\"lost\"); state per input of each source",
          {
              {"high_threshold", ParamType::number, "0.5", "boxes at or above this score take part in the first association", 0.0, 1.0},
              {"low_threshold", ParamType::number, "0.1",
               "boxes from this score up to high_threshold keep tracks that are already tracked (second association)",
               0.0, 1.0},
              {"new_threshold", ParamType::number, "0.6", "an unmatched box at or above this score starts a track", 0.0, 1.0},
              {"match_iou", ParamType::number, "0.2",
               "first association: a track and a high box match when IoU (x score with fuse_score) is above this", 0.0, 1.0},
              {"low_match_iou", ParamType::number, "0.5", "second association: IoU above this", 0.0, 1.0},
              {"tentative_match_iou", ParamType::number, "0.3",
               "a tentative (not yet confirmed) track and a high box: IoU (x score with fuse_score) above this", 0.0, 1.0},
              {"fuse_score", ParamType::boolean, "true", "weigh the IoU of high boxes by their score (ByteTrack's fuse_score)"},
              {"track_buffer", ParamType::integer, "30",
               "frames a lost track is kept for finding again before it ends (event \"lost\")", 0.0, 100000.0},
              {"min_hits", ParamType::integer, "2",
               "frames in a row a new track must be matched to be confirmed (id and event \"new\"); 1: at once", 1.0, 1000.0},
              {"max_tracks", ParamType::integer, "2048",
               "tracks per input at most (tentative, tracked and lost); beyond it new boxes start none", 1.0, 8192.0},
              {"per_class", ParamType::boolean, "false", "match a track only to boxes of its class (else any class)"},
              {"threads", ParamType::integer, "0",
               "threads tracking videos in parallel, the stage's own included (a video's frames stay in order on one); "
               "0: half the cores, at most 8; 1: the stage's thread only",
               0.0, 64.0},
          },
          [](const StageInit& init) -> std::unique_ptr<Stage> { return std::make_unique<TrackStage>(init); }};
  info.keeps_state = true;  // tracks live across batches: one tracker behind the replicas of gpus:
  return info;
}
SLUICE_REGISTER_STAGE(track_stage);

}  // namespace sluice
