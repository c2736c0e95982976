#pragma once
// Preprocess: one pass from a batch of source images to a model input tensor.
// Crop, bilinear resize (half-pixel centres, like cv::resize INTER_LINEAR and torch interpolate
// align_corners=False), optional letterbox, colour conversion, (x/255 - mean)/std normalisation, NCHW or NHWC,
// f32, f16 or bf16. The GPU launcher lives in preprocess.cuh, the CPU twin in preprocess_cpu.hpp; both take
// these params. This header is also compiled as C++17 (by nvcc).
#include <algorithm>
#include <cstdint>

#include "runtime/format.hpp"

namespace sluice::kernels {

enum class ChannelOrder : std::uint8_t { rgb, bgr, gray };
enum class YuvMatrix : std::uint8_t { bt601, bt709 };

struct PreprocessParams {
  int batch = 1;
  // Source: `batch` images of in_format, tightly packed (no row padding), one after another.
  PixelFormat in_format = PixelFormat::bgr8;
  int in_width = 0, in_height = 0;
  // YUV sources (nv12, i420): matrix and range (full: Y 0..255; limited: Y 16..235, UV 16..240).
  YuvMatrix yuv_matrix = YuvMatrix::bt601;
  bool yuv_full_range = false;
  // Crop: the source region that is resized, as if it were the whole image (samples clamp at its edges).
  // crop_width/crop_height 0 = up to the right/bottom edge of the frame (so all zeros = the full frame).
  // For nv12/i420 the origin and the (effective) size must be even.
  int crop_x = 0, crop_y = 0, crop_width = 0, crop_height = 0;
  // Letterbox: keep the crop's aspect ratio. scale = min(out_w/crop_w, out_h/crop_h); the crop is resized to
  // round(crop_w*scale) x round(crop_h*scale) (halves round up, at least 1), placed at
  // floor((out - resized)/2), and every output pixel outside it is pad_value (source units 0..255, the same
  // value in every channel, normalised like a pixel: (pad/255 - mean)/std). Off: the crop fills the output.
  bool letterbox = false;
  float pad_value = 114.f;
  // Destination: `batch` tensors of out_channels x out_height x out_width, one after another.
  ChannelOrder out_order = ChannelOrder::rgb;  // gray -> 1 channel, else 3
  int out_width = 0, out_height = 0;
  Layout layout = Layout::nchw;
  DType dtype = DType::f32;  // f32, f16 or bf16 (f16 and bf16 round to nearest even)
  float mean[3] = {0.f, 0.f, 0.f};  // in units of x/255, per output channel
  float std[3] = {1.f, 1.f, 1.f};

  int out_channels() const noexcept { return out_order == ChannelOrder::gray ? 1 : 3; }
};

// Where the resized crop lands. Output pixel (x, y) with img_x <= x < img_x + img_w and
// img_y <= y < img_y + img_h samples the crop at the half-pixel-centre coordinate
// crop_x + ((x - img_x) + 0.5) * crop_w / img_w - 0.5 (clamped to the crop), likewise in y; every other pixel is
// padding. Without letterbox the image is the whole output. Exact integer maths (no float rounding), so the CPU
// twin and the GPU kernel get identical geometry. Meaningful only for params that pass validate().
struct PreprocessGeometry {
  int crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;
  int img_x = 0, img_y = 0, img_w = 0, img_h = 0;
};

inline PreprocessGeometry preprocess_geometry(const PreprocessParams& p) noexcept {
  PreprocessGeometry g;
  g.crop_x = p.crop_x;
  g.crop_y = p.crop_y;
  g.crop_w = p.crop_width > 0 ? p.crop_width : p.in_width - p.crop_x;
  g.crop_h = p.crop_height > 0 ? p.crop_height : p.in_height - p.crop_y;
  g.img_w = p.out_width;
  g.img_h = p.out_height;
  if (p.letterbox && g.crop_w > 0 && g.crop_h > 0) {
    const long long cw = g.crop_w, ch = g.crop_h, ow = p.out_width, oh = p.out_height;
    // round(v * n / d) for positive integers, halves up: floor((2vn + d) / 2d).
    auto round_ratio = [](long long v, long long n, long long d) { return (2 * v * n + d) / (2 * d); };
    if (ow * ch <= oh * cw) {  // width-limited: scale = ow / cw
      g.img_h = static_cast<int>(std::clamp(round_ratio(ch, ow, cw), 1LL, oh));
    } else {  // height-limited: scale = oh / ch
      g.img_w = static_cast<int>(std::clamp(round_ratio(cw, oh, ch), 1LL, ow));
    }
    g.img_x = (p.out_width - g.img_w) / 2;
    g.img_y = (p.out_height - g.img_h) / 2;
  }
  return g;
}

}  // namespace sluice::kernels
