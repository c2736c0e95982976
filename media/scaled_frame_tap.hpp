#pragma once
// A copy of the source frames for sinks that draw onto them (the pipeline is linear: after infer the batch
// holds results, not pictures). The source puts each frame in, scaled to the tap's size as BGR; the sink
// takes it back by (source, sequence). Bounded: the oldest entries are evicted when full, which only ever
// hits frames that a queue dropped or a stage failed, when the capacity exceeds the frames in flight.
//
// Conversion: bgr8/rgb8/gray8 as they are; nv12/i420 as BT.601 limited range (OpenCV's YUV2BGR_NV12/I420,
// the inverse of what the test source renders); then scaled with INTER_AREA when shrinking, else INTER_LINEAR.
// No allocation per frame: the slots are allocated once (at the first put(), so that a tap made by a stage's
// constructor costs nothing until frames flow), and each source thread keeps one scratch image for its size.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "runtime/frame_tap.hpp"

namespace sluice {

class ScaledFrameTap final : public FrameTap {
 public:
  // width x height BGR copies, `capacity` of them (at least 1). Width and height 0: the size of the first frame
  // put (an empty frame is not taken), and then at most max(1, max_bytes / frame bytes) of them when max_bytes
  // is not 0.
  ScaledFrameTap(int width, int height, std::size_t capacity, std::size_t max_bytes = 0);
  // From the source threads: converts and scales `frame` into a free (or the oldest) slot. The conversion
  // runs outside the lock, so sources do not wait on each other.
  void put(const FrameMeta& meta, const FrameTarget& frame) override;
  // The size a frame had when the source put it (before scaling).
  struct SourceSize {
    int width = 0, height = 0;
  };
  // Copies the frame of (source_id, sequence) into `bgr` (resized to width*height*3 bytes) and frees its slot;
  // false when it is not there (evicted, or never put). `source`: where to put the frame's size as it was put.
  bool take(std::uint32_t source_id, std::uint64_t sequence, std::vector<std::uint8_t>& bgr,
            SourceSize* source = nullptr);
  int width() const;   // 0 while the size is to come from the first frame
  int height() const;
  std::size_t capacity() const;
  std::size_t size() const;          // frames held now
  std::uint64_t evicted() const;     // frames pushed out before anyone took them

 private:
  enum class State : std::uint8_t { free, writing, ready };
  struct Slot {
    std::uint32_t source_id = 0;
    std::uint64_t sequence = 0, age = 0;
    State state = State::free;
    SourceSize source;
  };
  int width_, height_;
  std::size_t slot_bytes_, max_bytes_;
  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  std::vector<std::uint8_t> pixels_;
  std::uint64_t clock_ = 0, evicted_ = 0;
};

}  // namespace sluice
