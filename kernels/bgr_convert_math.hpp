#pragma once
// The per-pixel arithmetic shared by the BGR conversion kernel and its CPU twin (C++17, host and device), so
// both compute the same integers. Resizing reuses the NV12 conversion's fixed-point bilinear sampling.
#include <cstddef>
#include <cstdint>

#include "kernels/bgr_convert.hpp"
#include "kernels/nv12_convert_math.hpp"

namespace sluice::kernels::bgr {

// The stored pixel that shows at (u, v) of the upright image (EXIF orientation p.orientation).
SLUICE_HD const std::uint8_t* upright_at(const BgrConvertParams& p, const std::uint8_t* src, int u, int v) {
  const int w = p.in_width, h = p.in_height;
  int x = u, y = v;
  switch (p.orientation) {
    case 2: x = w - 1 - u; break;                   // mirrored left-right
    case 3: x = w - 1 - u; y = h - 1 - v; break;    // turned 180 degrees
    case 4: y = h - 1 - v; break;                   // mirrored top-bottom
    case 5: x = v; y = u; break;                    // transposed
    case 6: x = v; y = h - 1 - u; break;            // shown turned 90 degrees clockwise
    case 7: x = w - 1 - v; y = h - 1 - u; break;    // transversed
    case 8: x = w - 1 - v; y = u; break;            // shown turned 90 degrees counter-clockwise
    default: break;
  }
  return src + static_cast<std::size_t>(y) * p.in_pitch + static_cast<std::size_t>(x) * 3;
}

// The upright, resized image's pixel (x, y): b, g, r.
SLUICE_HD void pixel_at(const BgrConvertParams& p, const std::uint8_t* src, int x, int y, int& b, int& g, int& r) {
  const bool sideways = p.orientation >= 5;
  const int uw = sideways ? p.in_height : p.in_width, uh = sideways ? p.in_width : p.in_height;
  int x0, x1, wx, y0, y1, wy;
  nv12::source_pos(x, p.out_width, uw, x0, x1, wx);
  nv12::source_pos(y, p.out_height, uh, y0, y1, wy);
  const std::uint8_t* p00 = upright_at(p, src, x0, y0);
  const std::uint8_t* p01 = upright_at(p, src, x1, y0);
  const std::uint8_t* p10 = upright_at(p, src, x0, y1);
  const std::uint8_t* p11 = upright_at(p, src, x1, y1);
  int c[3];
  for (int k = 0; k < 3; ++k) c[k] = nv12::blend(p00[k], p01[k], p10[k], p11[k], wx, wy);
  b = c[0];
  g = c[1];
  r = c[2];
}

// OpenCV's BGR2GRAY for 8-bit images (15-bit fixed point).
SLUICE_HD std::uint8_t gray(int b, int g, int r) {
  return static_cast<std::uint8_t>((9798 * r + 19235 * g + 3735 * b + 16384) >> 15);
}

// OpenCV's BGR2YUV_I420 (BT.601 limited range, 20-bit fixed point).
SLUICE_HD std::uint8_t luma(int b, int g, int r) {
  return nv12::clamp255((269484 * r + 528482 * g + 102760 * b + (16 << 20) + (1 << 19)) >> 20);
}
SLUICE_HD std::uint8_t chroma_u(int b, int g, int r) {
  return nv12::clamp255((-155188 * r - 305135 * g + 460324 * b + (128 << 20) + (1 << 19)) >> 20);
}
SLUICE_HD std::uint8_t chroma_v(int b, int g, int r) {
  return nv12::clamp255((460324 * r - 385875 * g - 74448 * b + (128 << 20) + (1 << 19)) >> 20);
}

// Writes everything output pixel (x, y) owns: its colour (bgr8/rgb8/gray8) or its luma, plus for the top-left
// quarter of nv12/i420 outputs the chroma pair of block (x, y), from the block's top-left pixel.
SLUICE_HD void convert_pixel(const BgrConvertParams& p, const std::uint8_t* src, std::uint8_t* dst, int x, int y) {
  const std::size_t at = static_cast<std::size_t>(y) * p.out_width + x;
  int b, g, r;
  pixel_at(p, src, x, y, b, g, r);
  switch (p.out_format) {
    case PixelFormat::bgr8:
    case PixelFormat::rgb8: {
      std::uint8_t* px = dst + at * 3;
      const bool is_bgr = p.out_format == PixelFormat::bgr8;
      px[0] = static_cast<std::uint8_t>(is_bgr ? b : r);
      px[1] = static_cast<std::uint8_t>(g);
      px[2] = static_cast<std::uint8_t>(is_bgr ? r : b);
      return;
    }
    case PixelFormat::gray8: dst[at] = gray(b, g, r); return;
    case PixelFormat::nv12:
    case PixelFormat::i420: {
      dst[at] = luma(b, g, r);
      const int ow = p.out_width / 2, oh = p.out_height / 2;
      if (x >= ow || y >= oh) return;
      pixel_at(p, src, 2 * x, 2 * y, b, g, r);
      std::uint8_t* planes = dst + static_cast<std::size_t>(p.out_width) * p.out_height;
      const std::size_t c = static_cast<std::size_t>(y) * ow + x;
      if (p.out_format == PixelFormat::nv12) {
        planes[c * 2] = chroma_u(b, g, r);
        planes[c * 2 + 1] = chroma_v(b, g, r);
      } else {
        planes[c] = chroma_u(b, g, r);
        planes[static_cast<std::size_t>(ow) * oh + c] = chroma_v(b, g, r);
      }
      return;
    }
  }
}

}  // namespace sluice::kernels::bgr
