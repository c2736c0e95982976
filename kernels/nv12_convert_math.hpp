#pragma once
// The per-pixel arithmetic shared by the NV12 conversion kernel and its CPU twin (C++17, host and device), so
// both compute the same integers.
#include <cstddef>
#include <cstdint>

#include "kernels/nv12_convert.hpp"
#include "kernels/host_device.hpp"

namespace sluice::kernels::nv12 {

// Source position of output index `o` (of `out` samples) on an axis of `in` samples, in 1/256 units, with
// half-pixel centres, clamped to the first and last sample.
SLUICE_HD void source_pos(int o, int out, int in, int& i0, int& i1, int& w) {
  long long f = ((2LL * o + 1) * in * 256) / (2LL * out) - 128;
  if (f < 0) f = 0;
  const long long last = (static_cast<long long>(in) - 1) * 256;
  if (f > last) f = last;
  i0 = static_cast<int>(f >> 8);
  w = static_cast<int>(f & 255);
  i1 = i0 + 1 < in ? i0 + 1 : i0;
}

// One sample: 8-bit, or the high byte of a little-endian 16-bit one.
SLUICE_HD int sample(const std::uint8_t* row, int x, int bytes, int stride) {
  return bytes == 1 ? row[x * stride] : row[x * stride * 2 + 1];
}

// Bilinear blend of four samples with 1/256 weights, rounded.
SLUICE_HD int blend(int p00, int p01, int p10, int p11, int wx, int wy) {
  const int top = p00 * (256 - wx) + p01 * wx;
  const int bottom = p10 * (256 - wx) + p11 * wx;
  return (top * (256 - wy) + bottom * wy + 32768) >> 16;
}

// Bilinear sample of a plane (element `component` of `stride` interleaved ones) at output (ox, oy).
SLUICE_HD int plane_at(const std::uint8_t* plane, std::size_t pitch, int in_w, int in_h, int bytes, int stride,
                       int component, int ox, int oy, int out_w, int out_h) {
  int x0, x1, wx, y0, y1, wy;
  source_pos(ox, out_w, in_w, x0, x1, wx);
  source_pos(oy, out_h, in_h, y0, y1, wy);
  const std::uint8_t* r0 = plane + static_cast<std::size_t>(y0) * pitch + component * bytes;
  const std::uint8_t* r1 = plane + static_cast<std::size_t>(y1) * pitch + component * bytes;
  return blend(sample(r0, x0, bytes, stride), sample(r0, x1, bytes, stride), sample(r1, x0, bytes, stride),
               sample(r1, x1, bytes, stride), wx, wy);
}

SLUICE_HD std::uint8_t clamp255(int v) { return static_cast<std::uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v)); }

// BT.601 limited range -> R, G, B (integer form).
SLUICE_HD void yuv_to_rgb(int y, int u, int v, std::uint8_t& r, std::uint8_t& g, std::uint8_t& b) {
  const int c = 298 * (y - 16), d = u - 128, e = v - 128;
  r = clamp255((c + 409 * e + 128) >> 8);
  g = clamp255((c - 100 * d - 208 * e + 128) >> 8);
  b = clamp255((c + 516 * d + 128) >> 8);
}

SLUICE_HD std::uint8_t luma_to_gray(int y) { return clamp255((298 * (y - 16) + 128) >> 8); }

// Writes everything output pixel (x, y) owns: its colour (bgr8/rgb8/gray8) or its luma, plus for the top-left
// quarter of nv12/i420 outputs one chroma pair.
SLUICE_HD void convert_pixel(const Nv12ConvertParams& p, const std::uint8_t* luma, const std::uint8_t* chroma,
                             std::uint8_t* dst, int x, int y) {
  const int bytes = p.in_bytes_per_sample;
  const int cw = (p.in_width + 1) / 2, ch = (p.in_height + 1) / 2;
  const std::size_t at = static_cast<std::size_t>(y) * p.out_width + x;
  const int yv = plane_at(luma, p.in_pitch, p.in_width, p.in_height, bytes, 1, 0, x, y, p.out_width, p.out_height);
  switch (p.out_format) {
    case PixelFormat::bgr8:
    case PixelFormat::rgb8: {
      const int u = plane_at(chroma, p.in_pitch, cw, ch, bytes, 2, 0, x, y, p.out_width, p.out_height);
      const int v = plane_at(chroma, p.in_pitch, cw, ch, bytes, 2, 1, x, y, p.out_width, p.out_height);
      std::uint8_t r, g, b;
      yuv_to_rgb(yv, u, v, r, g, b);
      std::uint8_t* px = dst + at * 3;
      const bool bgr = p.out_format == PixelFormat::bgr8;
      px[0] = bgr ? b : r;
      px[1] = g;
      px[2] = bgr ? r : b;
      return;
    }
    case PixelFormat::gray8: dst[at] = luma_to_gray(yv); return;
    case PixelFormat::nv12:
    case PixelFormat::i420: {
      dst[at] = static_cast<std::uint8_t>(yv);
      const int ow = p.out_width / 2, oh = p.out_height / 2;
      if (x >= ow || y >= oh) return;
      const int u = plane_at(chroma, p.in_pitch, cw, ch, bytes, 2, 0, x, y, ow, oh);
      const int v = plane_at(chroma, p.in_pitch, cw, ch, bytes, 2, 1, x, y, ow, oh);
      std::uint8_t* planes = dst + static_cast<std::size_t>(p.out_width) * p.out_height;
      const std::size_t c = static_cast<std::size_t>(y) * ow + x;
      if (p.out_format == PixelFormat::nv12) {
        planes[c * 2] = static_cast<std::uint8_t>(u);
        planes[c * 2 + 1] = static_cast<std::uint8_t>(v);
      } else {
        planes[c] = static_cast<std::uint8_t>(u);
        planes[static_cast<std::size_t>(ow) * oh + c] = static_cast<std::uint8_t>(v);
      }
      return;
    }
  }
}

}  // namespace sluice::kernels::nv12
