#pragma once
// Where a decoded frame goes in its target (ReaderOptions::fit), and the quarter turns that put a rotated
// video upright: plain geometry shared by the readers, no codec or image library involved.
#include <cstddef>
#include <cstdint>

#include "runtime/frame_reader.hpp"

namespace sluice {

struct PixelRect {
  int x = 0, y = 0, width = 0, height = 0;
  friend bool operator==(const PixelRect&, const PixelRect&) = default;
};

// One frame's placement: the part of the (upright) frame that is shown, and the part of the target it is
// scaled into; the target outside `dest` is black (letterbox bars).
struct FitPlan {
  PixelRect source;
  PixelRect dest;
};

// Places a frame of frame_w x frame_h (> 0) into a target of target_w x target_h (> 0). `align` (1 or 2)
// keeps dest's position and size multiples of it (2 for nv12/i420 targets: whole chroma samples) and the
// source's likewise (2 for 4:2:0 frames cropped before scaling). stretch: the whole frame onto the whole
// target; letterbox: the whole frame, aspect kept, centred; crop: the frame's centre with the target's
// aspect, onto the whole target.
FitPlan plan_fit(int frame_w, int frame_h, int target_w, int target_h, Fit fit, int target_align = 1,
                 int source_align = 1) noexcept;

// The rect of an upright frame (after `quarter_turns` clockwise quarter turns of the stored w x h frame) in
// the stored frame's coordinates.
PixelRect unrotate_rect(const PixelRect& upright, int stored_w, int stored_h, int quarter_turns) noexcept;

// Copies a plane of w x h elements of `element_bytes` (1: gray, Y, U, V; 2: interleaved UV; 3: BGR) into
// `dst`, turned `quarter_turns` (0..3) times clockwise: dst is h x w for odd turns, w x h for even ones.
// Strides are in bytes.
void rotate_plane(const std::uint8_t* src, std::ptrdiff_t src_stride, int w, int h, int element_bytes,
                  std::uint8_t* dst, std::ptrdiff_t dst_stride, int quarter_turns) noexcept;

}  // namespace sluice
