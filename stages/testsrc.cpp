#include "stages/testsrc.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace sluice {
namespace {

struct Rgb {
  std::uint8_t r, g, b;
};

// 75% colour bars, left to right.
constexpr Rgb kBars[8] = {{191, 191, 191}, {191, 191, 0}, {0, 191, 191}, {0, 191, 0},
                          {191, 0, 191},   {191, 0, 0},   {0, 0, 191},   {16, 16, 16}};

std::uint8_t clamp_u8(int v) { return static_cast<std::uint8_t>(std::clamp(v, 0, 255)); }

// BT.601 limited range in 8-bit fixed point (the usual integer form), the inverse of what preprocess
// assumes by default.
std::uint8_t luma(const std::uint8_t* p) { return clamp_u8(((66 * p[0] + 129 * p[1] + 25 * p[2] + 128) >> 8) + 16); }
std::uint8_t chroma_u(const std::uint8_t* p) { return clamp_u8(((-38 * p[0] - 74 * p[1] + 112 * p[2] + 128) >> 8) + 128); }
std::uint8_t chroma_v(const std::uint8_t* p) { return clamp_u8(((112 * p[0] - 94 * p[1] - 18 * p[2] + 128) >> 8) + 128); }

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::optional<TestPattern> parse_test_pattern(std::string_view s) noexcept {
  for (int i = 0; i < 5; ++i)
    if (s == kTestPatternNames[i]) return static_cast<TestPattern>(i);
  return std::nullopt;
}

TestPatternRenderer::TestPatternRenderer(TestPattern pattern, PixelFormat format, int width, int height,
                                         std::uint64_t seed)
    : pattern_(pattern), format_(format), width_(width), height_(height), seed_(seed),
      row_(static_cast<std::size_t>(width) * 3), ramp_(static_cast<std::size_t>(width)) {
  for (int x = 0; x < width; ++x) ramp_[static_cast<std::size_t>(x)] = static_cast<std::uint8_t>(x * 255 / width);
}

void TestPatternRenderer::render_rgb_row(std::uint64_t index, int y, std::uint8_t* rgb) {
  const int w = width_, h = height_;
  auto put = [&](int x, Rgb c) {
    rgb[3 * x] = c.r;
    rgb[3 * x + 1] = c.g;
    rgb[3 * x + 2] = c.b;
  };
  switch (pattern_) {
    case TestPattern::bars:
      for (int x = 0; x < w; ++x) put(x, kBars[x * 8 / w]);
      break;
    case TestPattern::gradient: {
      const auto shift = static_cast<int>(index * 4 % static_cast<std::uint64_t>(w));
      const auto g = static_cast<std::uint8_t>(y * 255 / std::max(1, h - 1));
      for (int x = 0, v = shift; x < w; ++x, v = v + 1 == w ? 0 : v + 1) put(x, {ramp_[static_cast<std::size_t>(v)], g, 128});
      break;
    }
    case TestPattern::checkerboard: {
      const int cell = std::max(2, h / 8);
      const auto shift = static_cast<int>(index * 2 % static_cast<std::uint64_t>(2 * cell));
      for (int x = 0; x < w; ++x) {
        const bool white = (((x + shift) / cell) + (y / cell)) % 2 == 0;
        put(x, white ? Rgb{235, 235, 235} : Rgb{20, 20, 20});
      }
      break;
    }
    case TestPattern::shapes: {
      // A red disc moving right and a green square moving down, on dark grey; spans, not per-pixel tests.
      const int r = std::max(2, h / 8);
      const auto cx = static_cast<int>((index * 8) % static_cast<std::uint64_t>(w));
      const int cy = h / 3;
      const int side = std::max(2, h / 5);
      const int sx = w * 2 / 3;
      const auto sy = static_cast<int>((index * 6) % static_cast<std::uint64_t>(std::max(1, h - side)));
      for (int x = 0; x < w; ++x) put(x, {40, 40, 40});
      if (const int dy = y - cy; dy * dy <= r * r) {
        int dx = 0;
        while ((dx + 1) * (dx + 1) + dy * dy <= r * r) ++dx;
        for (int x = std::max(0, cx - dx); x <= std::min(w - 1, cx + dx); ++x) put(x, {220, 30, 30});
      }
      if (y >= sy && y < sy + side)
        for (int x = sx; x < std::min(w, sx + side); ++x) put(x, {30, 200, 60});
      break;
    }
    case TestPattern::noise: {
      std::uint64_t state = mix(seed_ ^ mix(index * 0x100000001b3ULL + static_cast<std::uint64_t>(y)));
      for (int x = 0; x + 2 < 3 * w; x += 8) {
        state = mix(state);
        std::memcpy(rgb + x, &state, static_cast<std::size_t>(std::min(8, 3 * w - x)));
      }
      break;
    }
  }
}

bool TestPatternRenderer::same_as_previous_row(std::uint64_t index, int y) const {
  const int h = height_;
  switch (pattern_) {
    case TestPattern::bars: return true;
    case TestPattern::checkerboard: {
      const int cell = std::max(2, h / 8);
      return y / cell == (y - 1) / cell;
    }
    case TestPattern::shapes: {
      // Rows that cross neither shape are plain background.
      const int r = std::max(2, h / 8), cy = h / 3, side = std::max(2, h / 5);
      const auto sy = static_cast<int>((index * 6) % static_cast<std::uint64_t>(std::max(1, h - side)));
      auto plain = [&](int row) { return std::abs(row - cy) > r && (row < sy || row >= sy + side); };
      return plain(y) && plain(y - 1);
    }
    case TestPattern::gradient:
    case TestPattern::noise: return false;
  }
  return false;
}

void TestPatternRenderer::copy_previous_row(std::uint8_t* dst, int y) const {
  const auto w = static_cast<std::size_t>(width_), yy = static_cast<std::size_t>(y);
  const auto plane = w * static_cast<std::size_t>(height_);
  switch (format_) {
    case PixelFormat::rgb8:
    case PixelFormat::bgr8: std::memcpy(dst + yy * w * 3, dst + (yy - 1) * w * 3, w * 3); return;
    case PixelFormat::gray8: std::memcpy(dst + yy * w, dst + (yy - 1) * w, w); return;
    case PixelFormat::nv12:
    case PixelFormat::i420:
      std::memcpy(dst + yy * w, dst + (yy - 1) * w, w);
      if (y % 2 == 0) {  // the caller checked that the chroma row above came from an identical row
        const std::size_t crow = yy / 2, cw = w / 2;
        if (format_ == PixelFormat::nv12) {
          std::memcpy(dst + plane + crow * w, dst + plane + (crow - 1) * w, w);
        } else {
          std::memcpy(dst + plane + crow * cw, dst + plane + (crow - 1) * cw, cw);
          std::memcpy(dst + plane + plane / 4 + crow * cw, dst + plane + plane / 4 + (crow - 1) * cw, cw);
        }
      }
      return;
  }
}

void TestPatternRenderer::render(std::uint64_t index, std::byte* dst_bytes) {
  auto* dst = reinterpret_cast<std::uint8_t*>(dst_bytes);
  const auto w = static_cast<std::size_t>(width_);
  const auto plane = w * static_cast<std::size_t>(height_);
  std::uint8_t* rgb = row_.data();
  for (int y = 0; y < height_; ++y) {
    const auto yy = static_cast<std::size_t>(y);
    // A YUV row that starts a chroma row (even y) may copy only if the chroma row above came from the same
    // picture row, i.e. row y-1 was itself a copy of row y-2.
    const bool yuv = format_ == PixelFormat::nv12 || format_ == PixelFormat::i420;
    if (y > 0 && same_as_previous_row(index, y) &&
        (!yuv || y % 2 == 1 || (y >= 2 && same_as_previous_row(index, y - 1)))) {
      copy_previous_row(dst, y);
      continue;
    }
    render_rgb_row(index, y, rgb);
    switch (format_) {
      case PixelFormat::rgb8: std::memcpy(dst + yy * w * 3, rgb, w * 3); break;
      case PixelFormat::bgr8: {
        std::uint8_t* out = dst + yy * w * 3;
        for (std::size_t x = 0; x < w; ++x) {
          out[3 * x] = rgb[3 * x + 2];
          out[3 * x + 1] = rgb[3 * x + 1];
          out[3 * x + 2] = rgb[3 * x];
        }
        break;
      }
      case PixelFormat::gray8:
        // Full-range luma for grey.
        for (std::size_t x = 0; x < w; ++x)
          dst[yy * w + x] = clamp_u8((77 * rgb[3 * x] + 150 * rgb[3 * x + 1] + 29 * rgb[3 * x + 2] + 128) >> 8);
        break;
      case PixelFormat::nv12:
      case PixelFormat::i420: {
        for (std::size_t x = 0; x < w; ++x) dst[yy * w + x] = luma(rgb + 3 * x);
        if (y % 2) break;
        // Chroma from the top-left pixel of each 2x2 block.
        const std::size_t cw = w / 2, crow = yy / 2;
        for (std::size_t cx = 0; cx < cw; ++cx) {
          const std::uint8_t* p = rgb + 6 * cx;
          if (format_ == PixelFormat::nv12) {
            dst[plane + crow * w + 2 * cx] = chroma_u(p);
            dst[plane + crow * w + 2 * cx + 1] = chroma_v(p);
          } else {
            dst[plane + crow * cw + cx] = chroma_u(p);
            dst[plane + plane / 4 + crow * cw + cx] = chroma_v(p);
          }
        }
        break;
      }
    }
  }
}

}  // namespace sluice
