// The NV12/P016 conversion's CPU twin (kernels/nv12_convert_cpu.hpp; the GPU kernel is held to it in
// tests/gpu/test_nvdec_gpu.cpp) with its geometry: a turned frame, a shown part and a destination with black
// around it must give exactly the bytes of the plain conversion applied to the frame turned, cut and pasted
// first (turning only reindexes samples; the bilinear sum is rounded once).
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/nv12_convert_cpu.hpp"

using namespace sluice;
using namespace sluice::kernels;

namespace {

using Bytes = std::vector<std::uint8_t>;

// A plane of w x h elements of `eb` bytes, rows `pitch` bytes apart, turned `turns` clockwise quarter turns
// (tightly packed).
Bytes turn(const std::uint8_t* src, std::size_t pitch, int w, int h, int eb, int turns, int& tw, int& th) {
  tw = turns % 2 ? h : w;
  th = turns % 2 ? w : h;
  Bytes out(static_cast<std::size_t>(tw) * th * eb);
  for (int v = 0; v < th; ++v)
    for (int u = 0; u < tw; ++u) {
      int x = u, y = v;  // the stored element shown at upright (u, v)
      if (turns == 1) x = v, y = h - 1 - u;
      if (turns == 2) x = w - 1 - u, y = h - 1 - v;
      if (turns == 3) x = w - 1 - v, y = u;
      for (int b = 0; b < eb; ++b)
        out[(static_cast<std::size_t>(v) * tw + u) * eb + b] = src[static_cast<std::size_t>(y) * pitch + x * eb + b];
    }
  return out;
}

// The part (x, y, w, h) of a tightly packed plane of `pw` elements, into rows of `pitch` bytes.
void cut(const Bytes& plane, int pw, int eb, int x, int y, int w, int h, std::size_t pitch, std::uint8_t* dst) {
  for (int r = 0; r < h; ++r)
    for (int c = 0; c < w * eb; ++c)
      dst[static_cast<std::size_t>(r) * pitch + c] = plane[(static_cast<std::size_t>(y + r) * pw + x) * eb + c];
}

// What the geometry must equal: turn, cut, convert plainly at dst's size, paste onto black.
Bytes reference(const Nv12ConvertParams& p, const Bytes& luma, const Bytes& chroma) {
  const Nv12ConvertParams w = with_whole_rects(p);
  const int bps = p.in_bytes_per_sample;
  int uw, uh, cuw, cuh;
  const Bytes y_up = turn(luma.data(), p.in_pitch, p.in_width, p.in_height, bps, p.quarter_turns, uw, uh);
  const Bytes c_up = turn(chroma.data(), p.in_pitch, (p.in_width + 1) / 2, (p.in_height + 1) / 2, 2 * bps,
                          p.quarter_turns, cuw, cuh);
  Nv12ConvertParams plain;
  plain.in_width = w.src_w, plain.in_height = w.src_h, plain.in_bytes_per_sample = bps;
  const int cw = (w.src_w + 1) / 2, ch = (w.src_h + 1) / 2;
  plain.in_pitch = static_cast<std::size_t>(cw) * 2 * bps;
  Bytes y_cut(plain.in_pitch * static_cast<std::size_t>(w.src_h)), c_cut(plain.in_pitch * static_cast<std::size_t>(ch));
  cut(y_up, uw, bps, w.src_x, w.src_y, w.src_w, w.src_h, plain.in_pitch, y_cut.data());
  cut(c_up, cuw, 2 * bps, w.src_x / 2, w.src_y / 2, cw, ch, plain.in_pitch, c_cut.data());
  plain.out_format = p.out_format, plain.out_width = w.dst_w, plain.out_height = w.dst_h;
  Bytes part(image_bytes(p.out_format, w.dst_w, w.dst_h));
  nv12_convert_cpu(plain, y_cut.data(), c_cut.data(), part.data());

  Bytes out(image_bytes(p.out_format, p.out_width, p.out_height));
  const bool yuv = p.out_format == PixelFormat::nv12 || p.out_format == PixelFormat::i420;
  const std::size_t luma_bytes = static_cast<std::size_t>(p.out_width) * p.out_height;
  std::fill(out.begin(), out.end(), yuv ? 128 : 0);
  if (yuv) std::fill(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(luma_bytes), 16);
  const int eb = p.out_format == PixelFormat::gray8 || yuv ? 1 : 3;
  for (int r = 0; r < w.dst_h; ++r)  // luma (or the whole picture)
    for (int c = 0; c < w.dst_w * eb; ++c)
      out[(static_cast<std::size_t>(w.dst_y + r) * p.out_width + w.dst_x) * eb + c] =
          part[static_cast<std::size_t>(r) * w.dst_w * eb + c];
  if (!yuv) return out;
  const int ow = p.out_width / 2, oh = p.out_height / 2, dw = w.dst_w / 2, dh = w.dst_h / 2;
  const std::size_t part_luma = static_cast<std::size_t>(w.dst_w) * w.dst_h;
  for (int r = 0; r < dh; ++r)
    for (int c = 0; c < dw; ++c) {
      const std::size_t to = static_cast<std::size_t>(w.dst_y / 2 + r) * ow + w.dst_x / 2 + c;
      const std::size_t from = static_cast<std::size_t>(r) * dw + c;
      if (p.out_format == PixelFormat::nv12) {
        out[luma_bytes + to * 2] = part[part_luma + from * 2];
        out[luma_bytes + to * 2 + 1] = part[part_luma + from * 2 + 1];
      } else {
        out[luma_bytes + to] = part[part_luma + from];
        out[luma_bytes + static_cast<std::size_t>(ow) * oh + to] = part[part_luma + static_cast<std::size_t>(dw) * dh + from];
      }
    }
  return out;
}

}  // namespace

TEST_CASE("NV12 conversion with turns, a shown part and letterbox bars equals turning, cutting and pasting first",
          "[nv12_convert]") {
  std::mt19937 rng(29);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int cases = 0;
  for (const PixelFormat format : {PixelFormat::bgr8, PixelFormat::rgb8, PixelFormat::gray8, PixelFormat::nv12, PixelFormat::i420})
    for (int turns = 0; turns < 4; ++turns)
      for (int round = 0; round < 12; ++round) {
        Nv12ConvertParams p;
        p.in_width = pick(2, 41), p.in_height = pick(2, 33), p.in_bytes_per_sample = round % 3 == 2 ? 2 : 1;
        p.in_pitch = static_cast<std::size_t>((p.in_width + 1) / 2) * 2 * p.in_bytes_per_sample + pick(0, 5);
        p.out_format = format;
        p.quarter_turns = turns;
        const bool even = format == PixelFormat::nv12 || format == PixelFormat::i420;
        p.out_width = pick(1, 24) * (even ? 2 : 1), p.out_height = pick(1, 20) * (even ? 2 : 1);
        const int uw = turns % 2 ? p.in_height : p.in_width, uh = turns % 2 ? p.in_width : p.in_height;
        if (round % 4 != 0) {  // a shown part at an even position, and a destination (even for nv12/i420)
          p.src_x = pick(0, (uw - 1) / 2) * 2, p.src_y = pick(0, (uh - 1) / 2) * 2;
          p.src_w = pick(1, uw - p.src_x), p.src_h = pick(1, uh - p.src_y);
          const int a = even ? 2 : 1;
          p.dst_w = pick(1, p.out_width / a) * a, p.dst_h = pick(1, p.out_height / a) * a;
          p.dst_x = pick(0, (p.out_width - p.dst_w) / a) * a, p.dst_y = pick(0, (p.out_height - p.dst_h) / a) * a;
        }
        CAPTURE(to_string(format), turns, p.in_width, p.in_height, p.in_bytes_per_sample, p.src_x, p.src_y, p.src_w,
                p.src_h, p.out_width, p.out_height, p.dst_x, p.dst_y, p.dst_w, p.dst_h);
        Bytes luma(p.in_pitch * static_cast<std::size_t>(p.in_height)), chroma(p.in_pitch * static_cast<std::size_t>((p.in_height + 1) / 2));
        for (auto& b : luma) b = static_cast<std::uint8_t>(pick(0, 255));
        for (auto& b : chroma) b = static_cast<std::uint8_t>(pick(0, 255));
        Bytes got(image_bytes(format, p.out_width, p.out_height), 7);
        nv12_convert_cpu(p, luma.data(), chroma.data(), got.data());
        REQUIRE(got == reference(p, luma, chroma));
        ++cases;
      }
  CHECK(cases == 5 * 4 * 12);
}

TEST_CASE("NV12 conversion refuses turns and rects outside the frame or the output", "[nv12_convert]") {
  Nv12ConvertParams p;
  p.in_width = 40, p.in_height = 20, p.in_pitch = 40, p.out_width = 16, p.out_height = 16;
  REQUIRE_NOTHROW(validate(p));
  const auto refused = [](Nv12ConvertParams q) { CHECK_THROWS_AS(validate(q), std::invalid_argument); };
  Nv12ConvertParams q = p;
  q.quarter_turns = 4;
  refused(q);
  q = p;
  q.quarter_turns = 1, q.src_w = 30, q.src_h = 10;  // upright 20 x 40: 30 wide does not fit
  refused(q);
  q.src_w = 20, q.src_h = 40;
  REQUIRE_NOTHROW(validate(q));
  q.src_x = 1, q.src_w = 18;  // odd position: half a chroma sample
  refused(q);
  q = p;
  q.dst_x = 10, q.dst_y = 0, q.dst_w = 8, q.dst_h = 16;  // past the output's right edge
  refused(q);
  q.out_format = PixelFormat::nv12, q.dst_x = 3, q.dst_w = 8;  // odd for nv12
  refused(q);
}
