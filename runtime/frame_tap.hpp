#pragma once
// Where a source hands a copy of each frame for sinks that draw onto the pictures (the pipeline is linear:
// after infer the batch holds results, not pictures). The sink that needs it sets PipelineShared::tap; the
// source calls put() for every frame it hands on. The implementation (scaling, colour conversion) is the media
// library's ScaledFrameTap, so the core needs no image library.
#include "runtime/batch.hpp"
#include "runtime/frame_reader.hpp"

namespace sluice {

class FrameTap {
 public:
  virtual ~FrameTap() = default;
  // From the source threads, once per frame, with the metadata the frame carries downstream.
  virtual void put(const FrameMeta& meta, const FrameTarget& frame) = 0;
};

}  // namespace sluice
