#pragma once
// The console's pictures (docs/console.md): a frame tap that keeps, for each source someone is watching, its latest
// frame, small, and hands it out as a JPEG. Where an annotate sink draws (boxes, labels, track ids), the drawn
// frames (FrameTap::put_drawn) are shown instead of the source's. The core has no image library: the media library registers the
// implementation (media/jpeg_thumbnail_tap.cpp) and make_thumbnail_tap() returns null in builds without it.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "runtime/frame_tap.hpp"

namespace sluice {

class ThumbnailTap : public FrameTap {
 public:
  // Source `source_id`'s latest kept frame as a JPEG; nullopt while there is none. Asking marks the source
  // watched: put() keeps its frames only while someone asked within the tap's watch period.
  struct Picture {
    std::string jpeg;
    std::uint64_t sequence = 0;  // FrameMeta::sequence of the frame shown
    bool drawn = false;          // with the detections an annotate sink drew on it
  };
  virtual std::optional<Picture> jpeg(std::uint32_t source_id) = 0;
  // Sources whose frames are kept now (asked for within the watch period).
  virtual std::size_t watched() const = 0;
};

using ThumbnailTapFactory = std::function<std::shared_ptr<ThumbnailTap>()>;

// The one factory of this program (set once by the media library's static registration).
inline ThumbnailTapFactory& thumbnail_tap_factory() {
  static ThumbnailTapFactory factory;
  return factory;
}

inline std::shared_ptr<ThumbnailTap> make_thumbnail_tap() {
  const auto& factory = thumbnail_tap_factory();
  return factory ? factory() : nullptr;
}

}  // namespace sluice
