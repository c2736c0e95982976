#pragma once
// Where a source hands a copy of each frame for sinks that draw onto the pictures (after infer the batch holds
// results, not pictures; Batch::pictures does not reach past a tee or into the sink's own size). A sink that needs
// it offers its tap (Stage::frame_tap()); the planner wires the taps of all such sinks to the source
// (PipelineShared::tap, which the source set keeps across reloads); the source calls put() for every frame it
// hands on. The implementation (scaling, colour conversion) is the media
// library's ScaledFrameTap, so the core needs no image library.
#include <memory>
#include <utility>
#include <vector>

#include "runtime/batch.hpp"
#include "runtime/frame_reader.hpp"

namespace sluice {

class FrameTap {
 public:
  virtual ~FrameTap() = default;
  // From the source threads, once per frame, with the metadata the frame carries downstream.
  virtual void put(const FrameMeta& meta, const FrameTarget& frame) = 0;
  // From a sink that drew onto the frame (annotate: boxes, labels, track ids), once it is drawn: for taps that
  // show pictures (the console's thumbnails) and prefer drawn ones. Most taps ignore it.
  virtual void put_drawn(const FrameMeta&, const FrameTarget&) {}
};

// Several sinks drawing onto the pictures (a tee with more than one): each frame to each of their taps.
class FanOutTap final : public FrameTap {
 public:
  explicit FanOutTap(std::vector<std::shared_ptr<FrameTap>> taps) : taps_(std::move(taps)) {}
  void put(const FrameMeta& meta, const FrameTarget& frame) override {
    for (const auto& tap : taps_) tap->put(meta, frame);
  }
  void put_drawn(const FrameMeta& meta, const FrameTarget& frame) override {
    for (const auto& tap : taps_) tap->put_drawn(meta, frame);
  }

 private:
  std::vector<std::shared_ptr<FrameTap>> taps_;
};

}  // namespace sluice
