#pragma once
// ROI crop: many boxes of a batch of source images, each cropped, resized (optionally letterboxed), colour
// converted and normalised into one tensor of a secondary model's input — the preprocess pass with a crop per
// output item instead of one per batch. Same maths as preprocess (kernels/preprocess.hpp): each ROI's output is
// exactly what preprocess gives for its image with that crop. The GPU launcher is roi_crop.cuh, the CPU twin
// roi_crop_cpu.hpp. Also compiled as C++17 by nvcc.
#include <cmath>
#include <cstdint>

#include "kernels/host_device.hpp"
#include "kernels/preprocess.hpp"

namespace sluice::kernels {

// A crop in whole source pixels of image `image` of the batch.
struct RoiRect {
  std::int32_t image = 0;
  std::int32_t x = 0, y = 0, width = 0, height = 0;
};

// NV12 and I420: chroma subsampled 2x2, so a rect's origin and size must be even.
SLUICE_HD bool is_yuv(PixelFormat f) { return f == PixelFormat::nv12 || f == PixelFormat::i420; }

// A rect the kernels read: its image in [0, images), non-empty, inside the image, and even-aligned for YUV
// sources (nv12, i420: chroma is subsampled 2x2). Any other rect yields an output of padding only (a hostile or
// stale box never makes a kernel read outside the images).
SLUICE_HD bool roi_rect_usable(const RoiRect& r, int images, int in_width, int in_height, bool yuv) {
  if (r.image < 0 || r.image >= images || r.x < 0 || r.y < 0 || r.width <= 0 || r.height <= 0) return false;
  if (static_cast<long long>(r.x) + r.width > in_width || static_cast<long long>(r.y) + r.height > in_height)
    return false;
  return !yuv || ((r.x | r.y | r.width | r.height) & 1) == 0;
}

// A whole-pixel coordinate (floor or ceil of a box edge) clamped to [0, limit] before the conversion to int.
SLUICE_HD int roi_pixel(float v, int limit) {
  return static_cast<int>(v < 0.f ? 0.f : v > static_cast<float>(limit) ? static_cast<float>(limit) : v);
}

// The smallest rect of whole pixels covering box [x1, x2) x [y1, y2) (source-frame pixels, as detections carry
// them), clipped to the image and at least one pixel (two, even-aligned, for YUV) on each side. A box with a
// non-finite coordinate or x2 < x1 (y2 < y1) gives an empty rect, which roi_rect_usable refuses.
SLUICE_HD RoiRect roi_rect_from_box(int image, float x1, float y1, float x2, float y2, int in_width, int in_height,
                                    bool yuv) {
  RoiRect r;
  r.image = image;
  if (!(x1 <= x2) || !(y1 <= y2) || !(x1 - x1 == 0.f) || !(x2 - x2 == 0.f) || !(y1 - y1 == 0.f) ||
      !(y2 - y2 == 0.f) || in_width <= 0 || in_height <= 0)
    return r;  // NaN or infinity (x - x is not 0), or inverted: empty
  int x0 = roi_pixel(floorf(x1), in_width - 1), y0 = roi_pixel(floorf(y1), in_height - 1);
  int xe = roi_pixel(ceilf(x2), in_width), ye = roi_pixel(ceilf(y2), in_height);
  if (yuv) {  // in_width/in_height are even for YUV sources
    x0 &= ~1;
    y0 &= ~1;
    xe = (xe + 1) & ~1;
    ye = (ye + 1) & ~1;
  }
  const int step = yuv ? 2 : 1;
  if (xe < x0 + step) xe = x0 + step;
  if (ye < y0 + step) ye = y0 + step;
  if (xe > in_width) xe = in_width;
  if (ye > in_height) ye = in_height;
  r.x = x0;
  r.y = y0;
  r.width = xe - x0;
  r.height = ye - y0;
  return r;
}

}  // namespace sluice::kernels
