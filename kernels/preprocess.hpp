#pragma once
// Preprocess: one pass from a batch of source images to a model input tensor.
// Crop, bilinear resize (half-pixel centres, like cv::resize INTER_LINEAR and torch interpolate
// align_corners=False), optional letterbox, colour conversion, (x/255 - mean)/std normalisation, NCHW or NHWC,
// f32, f16 or bf16. The GPU launcher lives in preprocess.cuh, the CPU twin in preprocess_cpu.hpp; both take
// these params. This header is also compiled as C++17 (by nvcc).
#include <algorithm>
#include <cstdint>

#include "kernels/host_device.hpp"
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

// Where a crop_w x crop_h crop lands in an out_w x out_h output (see PreprocessGeometry): the whole output, or
// with letterbox the aspect-keeping fit, centred. Host and device (the ROI crop places each box on the GPU).
struct ImagePlacement {
  int x = 0, y = 0, w = 0, h = 0;
};

// round(v * n / d) for positive integers, halves up: floor((2vn + d) / 2d), clamped to [1, limit].
SLUICE_HD int scaled_length(long long v, long long n, long long d, long long limit) {
  const long long r = (2 * v * n + d) / (2 * d);
  return static_cast<int>(r < 1 ? 1 : r > limit ? limit : r);
}

SLUICE_HD ImagePlacement place_image(int crop_w, int crop_h, int out_w, int out_h, bool letterbox) {
  ImagePlacement pl{0, 0, out_w, out_h};
  if (letterbox && crop_w > 0 && crop_h > 0) {
    const long long cw = crop_w, ch = crop_h, ow = out_w, oh = out_h;
    if (ow * ch <= oh * cw) pl.h = scaled_length(ch, ow, cw, oh);  // width-limited: scale = ow / cw
    else pl.w = scaled_length(cw, oh, ch, ow);                      // height-limited: scale = oh / ch
    pl.x = (out_w - pl.w) / 2;
    pl.y = (out_h - pl.h) / 2;
  }
  return pl;
}

inline PreprocessGeometry preprocess_geometry(const PreprocessParams& p) noexcept {
  PreprocessGeometry g;
  g.crop_x = p.crop_x;
  g.crop_y = p.crop_y;
  g.crop_w = p.crop_width > 0 ? p.crop_width : p.in_width - p.crop_x;
  g.crop_h = p.crop_height > 0 ? p.crop_height : p.in_height - p.crop_y;
  const ImagePlacement pl = place_image(g.crop_w, g.crop_h, p.out_width, p.out_height, p.letterbox);
  g.img_x = pl.x;
  g.img_y = pl.y;
  g.img_w = pl.w;
  g.img_h = pl.h;
  return g;
}

}  // namespace sluice::kernels
