#pragma once
// Puts a decoded AVFrame into a FrameTarget with libswscale: turned upright (the stream's rotation), placed
// as ReaderOptions::fit says (stretch, letterbox on black, centre crop), scaled (bicubic) and converted to
// the target's pixel format in one pass:
//   bgr8, rgb8   the source's YUV matrix (BT.709 where the stream says so, else BT.601) and range
//   gray8        full range 0.299 R + 0.587 G + 0.114 B (BT.601 luma)
//   nv12, i420   BT.601 limited range (libswscale converts a BT.709 source's YUV through RGB)
// Conversions run into the scaler's own padded buffers (libswscale's SIMD may write past a row's end) and
// are copied (or turned) into the target, which is never written outside its bytes. Contexts and buffers
// are kept across frames: nothing is allocated per frame while the input's size and format hold.
#include <cstdint>
#include <vector>

#include "runtime/frame_reader.hpp"

extern "C" {
struct AVFrame;
struct SwsContext;
}

namespace sluice {

class FrameScaler {
 public:
  FrameScaler() = default;
  ~FrameScaler();
  FrameScaler(const FrameScaler&) = delete;
  FrameScaler& operator=(const FrameScaler&) = delete;

  // `rotation`: clockwise degrees (0, 90, 180, 270) to turn the frame upright. Throws std::invalid_argument
  // for a target without memory, a size <= 0, odd sizes for nv12/i420, or a frame libswscale cannot read;
  // std::runtime_error when a conversion fails.
  void convert(const AVFrame& frame, int rotation, Fit fit, const FrameTarget& target);

 private:
  // A picture in the scaler's own memory: planes of one pixel format, rows 64-byte aligned.
  struct Scratch {
    std::uint8_t* data[4] = {};
    int linesize[4] = {};
    std::uint8_t* buffer = nullptr;
    std::size_t capacity = 0;
    int width = 0, height = 0, format = -1;
    void shape(int w, int h, int pix_fmt);  // (re)lays out the planes, growing the buffer when needed
    ~Scratch();
  };

  AVFrame* cropped_ = nullptr;   // a reference to the frame with the crop applied
  SwsContext* scale_ = nullptr;  // source -> scaled_ (the target's format, the frame's orientation)
  Scratch scaled_;
};

}  // namespace sluice
