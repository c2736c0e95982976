#pragma once
// The per-pixel arithmetic shared by the NV12 conversion kernel and its CPU twin (C++17, host and device), so
// both compute the same integers.
#include <cstddef>
#include <cstdint>

#include "kernels/nv12_convert.hpp"
#include "kernels/host_device.hpp"

namespace sluice::kernels::nv12 {

// Position (1/256 units of sample index) on an upright axis for output index `o` of `out` samples scaled from
// the shown part [first, first + length): half-pixel centres, clamped to the part's first and last sample.
SLUICE_HD int axis_pos(int o, int out, int first, int length) {
  long long f = ((2LL * o + 1) * length * 256) / (2LL * out) - 128;
  if (f < 0) f = 0;
  const long long last = (static_cast<long long>(length) - 1) * 256;
  if (f > last) f = last;
  return static_cast<int>(f + 256LL * first);
}

// The same for an axis shown whole (of `in` samples): the two samples blended and the second one's weight.
SLUICE_HD void source_pos(int o, int out, int in, int& i0, int& i1, int& w) {
  const int f = axis_pos(o, out, 0, in);
  i0 = f >> 8;
  w = f & 255;
  i1 = i0 + 1 < in ? i0 + 1 : i0;
}

// An upright position -> the stored plane's (nx x ny samples), for `turns` clockwise quarter turns that put the
// stored plane upright: upright (u, v) is stored (v, ny-1-u) after one turn, (nx-1-u, ny-1-v) after two,
// (nx-1-v, u) after three.
SLUICE_HD void to_stored(int turns, int fu, int fv, int nx, int ny, int& fx, int& fy) {
  switch (turns) {
    case 1: fx = fv, fy = (ny - 1) * 256 - fu; return;
    case 2: fx = (nx - 1) * 256 - fu, fy = (ny - 1) * 256 - fv; return;
    case 3: fx = (nx - 1) * 256 - fv, fy = fu; return;
    default: fx = fu, fy = fv;
  }
}

// One sample: 8-bit, or the high byte of a little-endian 16-bit one.
SLUICE_HD int sample(const std::uint8_t* row, int x, int bytes, int stride) {
  return bytes == 1 ? row[x * stride] : row[x * stride * 2 + 1];
}

// Bilinear blend of four samples with 1/256 weights, rounded. The sum is exact before the one rounding, so
// blending along x then y equals y then x: a turned plane gives the same integers as the plane turned first.
SLUICE_HD int blend(int p00, int p01, int p10, int p11, int wx, int wy) {
  const int top = p00 * (256 - wx) + p01 * wx;
  const int bottom = p10 * (256 - wx) + p11 * wx;
  return (top * (256 - wy) + bottom * wy + 32768) >> 16;
}

// A stored plane (element `component` of `stride` interleaved ones, nx x ny samples) and its upright view.
struct Plane {
  const std::uint8_t* data;
  std::size_t pitch;
  int nx, ny, bytes, stride, component;
};

// The plane sampled for output (ox, oy) of out_w x out_h, scaled from the upright part at (sx, sy) of sw x sh.
SLUICE_HD int plane_at(const Plane& pl, int turns, int sx, int sy, int sw, int sh, int ox, int oy, int out_w, int out_h) {
  int fx, fy;
  to_stored(turns, axis_pos(ox, out_w, sx, sw), axis_pos(oy, out_h, sy, sh), pl.nx, pl.ny, fx, fy);
  const int x0 = fx >> 8, wx = fx & 255, y0 = fy >> 8, wy = fy & 255;
  const int x1 = x0 + 1 < pl.nx ? x0 + 1 : x0, y1 = y0 + 1 < pl.ny ? y0 + 1 : y0;
  const std::uint8_t* r0 = pl.data + static_cast<std::size_t>(y0) * pl.pitch + pl.component * pl.bytes;
  const std::uint8_t* r1 = pl.data + static_cast<std::size_t>(y1) * pl.pitch + pl.component * pl.bytes;
  return blend(sample(r0, x0, pl.bytes, pl.stride), sample(r0, x1, pl.bytes, pl.stride),
               sample(r1, x0, pl.bytes, pl.stride), sample(r1, x1, pl.bytes, pl.stride), wx, wy);
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
// quarter of nv12/i420 outputs one chroma pair; black outside the destination rect. `p` has its rects filled in
// (with_whole_rects).
SLUICE_HD void convert_pixel(const Nv12ConvertParams& p, const std::uint8_t* luma, const std::uint8_t* chroma,
                             std::uint8_t* dst, int x, int y) {
  const int bytes = p.in_bytes_per_sample, turns = p.quarter_turns;
  const Plane y_plane{luma, p.in_pitch, p.in_width, p.in_height, bytes, 1, 0};
  Plane u_plane{chroma, p.in_pitch, (p.in_width + 1) / 2, (p.in_height + 1) / 2, bytes, 2, 0};
  Plane v_plane = u_plane;
  v_plane.component = 1;
  // The shown part in the chroma planes (src's position is even: whole chroma samples).
  const int csx = p.src_x / 2, csy = p.src_y / 2, csw = (p.src_w + 1) / 2, csh = (p.src_h + 1) / 2;
  const std::size_t at = static_cast<std::size_t>(y) * p.out_width + x;
  const int ox = x - p.dst_x, oy = y - p.dst_y;
  const bool shown = ox >= 0 && ox < p.dst_w && oy >= 0 && oy < p.dst_h;
  const bool subsampled = p.out_format == PixelFormat::nv12 || p.out_format == PixelFormat::i420;
  const int yv = shown ? plane_at(y_plane, turns, p.src_x, p.src_y, p.src_w, p.src_h, ox, oy, p.dst_w, p.dst_h)
                       : (subsampled ? 16 : -1);
  switch (p.out_format) {
    case PixelFormat::bgr8:
    case PixelFormat::rgb8: {
      std::uint8_t* px = dst + at * 3;
      if (!shown) {
        px[0] = px[1] = px[2] = 0;
        return;
      }
      const int u = plane_at(u_plane, turns, csx, csy, csw, csh, ox, oy, p.dst_w, p.dst_h);
      const int v = plane_at(v_plane, turns, csx, csy, csw, csh, ox, oy, p.dst_w, p.dst_h);
      std::uint8_t r, g, b;
      yuv_to_rgb(yv, u, v, r, g, b);
      const bool bgr = p.out_format == PixelFormat::bgr8;
      px[0] = bgr ? b : r;
      px[1] = g;
      px[2] = bgr ? r : b;
      return;
    }
    case PixelFormat::gray8: dst[at] = shown ? luma_to_gray(yv) : 0; return;
    case PixelFormat::nv12:
    case PixelFormat::i420: {
      dst[at] = static_cast<std::uint8_t>(yv);
      const int ow = p.out_width / 2, oh = p.out_height / 2;
      if (x >= ow || y >= oh) return;
      const int cx = x - p.dst_x / 2, cy = y - p.dst_y / 2, cdw = p.dst_w / 2, cdh = p.dst_h / 2;
      const bool chroma_shown = cx >= 0 && cx < cdw && cy >= 0 && cy < cdh;
      const int u = chroma_shown ? plane_at(u_plane, turns, csx, csy, csw, csh, cx, cy, cdw, cdh) : 128;
      const int v = chroma_shown ? plane_at(v_plane, turns, csx, csy, csw, csh, cx, cy, cdw, cdh) : 128;
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
