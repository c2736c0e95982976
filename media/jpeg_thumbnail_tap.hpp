#pragma once
// The console's thumbnails on the CPU (runtime/thumbnail_tap.hpp): frames the source already holds, converted and
// scaled with OpenCV (media/frame_to_bgr.hpp), JPEG-encoded with imgcodecs when asked. Cheap by construction:
//   - nobody watching: put() is one atomic load and returns;
//   - a watched source: a frame is scaled (to at most max_side pixels a side) only when someone asked since the
//     last one was kept, and at most one per `min_interval`: conversions follow the viewers' pace (the grid's one
//     a second, the live view's up to 10); the others return after a map lookup; the conversion runs outside the
//     lock (one allocation per kept frame: the shown picture may still be being encoded);
//   - JPEG only on request, once per kept frame however many viewers ask;
//   - frames an annotate sink drew (put_drawn) win over the source's raw ones for 2 s after each.
// A source stops being watched `watch_for` after its last request. No GPU (nvJPEG) path: frames reach the tap on
// the host (a tap turns off device frames, runtime/source_set.cpp).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>

#include <opencv2/core.hpp>

#include "runtime/thumbnail_tap.hpp"

namespace sluice {

class JpegThumbnailTap final : public ThumbnailTap {
 public:
  struct Settings {
    int max_side = 480;
    std::chrono::milliseconds min_interval{100};  // at most 10 kept frames/s per source (the live view's rate)
    std::chrono::milliseconds watch_for{10'000};
    int quality = 75;
    std::size_t max_sources = 4096;  // sources asked for at once (ids come from clients: bounded)
  };
  JpegThumbnailTap() : JpegThumbnailTap(Settings{}) {}
  explicit JpegThumbnailTap(Settings settings) : settings_(settings) {}

  void put(const FrameMeta& meta, const FrameTarget& frame) override;
  void put_drawn(const FrameMeta& meta, const FrameTarget& frame) override;
  std::optional<Picture> jpeg(std::uint32_t source_id) override;
  std::size_t watched() const override;
  std::uint64_t frames_kept() const { return kept_.load(); }  // conversions done (tests: nothing when unwatched)

 private:
  struct Entry {
    std::int64_t watched_until_ns = 0, last_kept_ns = 0;
    bool converting = false;
    std::uint64_t sequence = 0;
    cv::Mat bgr;  // replaced, never written in place: a reader's reference stays valid
    std::string jpeg;
    std::uint64_t jpeg_sequence = 0;
    bool have = false, encoded = false, drawn = false;
    bool wanted = true;  // asked for since the last frame was kept
    std::int64_t drawn_until_ns = 0;  // a sink drew this source's frames lately: its raw frames are not kept
  };
  void keep(const FrameMeta& meta, const FrameTarget& frame, bool drawn);
  Settings settings_;
  std::atomic<std::int64_t> any_watched_until_ns_{0};
  std::atomic<std::uint64_t> kept_{0};
  mutable std::mutex mu_;
  std::map<std::uint32_t, Entry> entries_;
};

}  // namespace sluice
