// Known-value tests of the preprocess CPU twin (the oracle the GPU kernel is checked against).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/half.hpp"
#include "kernels/preprocess_cpu.hpp"

using sluice::DType;
using sluice::Layout;
using sluice::PixelFormat;
using namespace sluice::kernels;

namespace {

std::size_t out_elems(const PreprocessParams& p) {
  return static_cast<std::size_t>(p.batch) * static_cast<std::size_t>(p.out_channels()) *
         static_cast<std::size_t>(p.out_width) * static_cast<std::size_t>(p.out_height);
}

std::vector<float> run_f32(const PreprocessParams& p, const std::vector<std::uint8_t>& src) {
  REQUIRE(src.size() == sluice::image_bytes(p.in_format, p.in_width, p.in_height) * static_cast<std::size_t>(p.batch));
  std::vector<float> out(out_elems(p), std::numeric_limits<float>::quiet_NaN());
  preprocess_cpu(p, src.data(), out.data());
  return out;
}

// Unnormalised 0..255 value of output (n, c, y, x) for mean 0, std 1.
float at255(const std::vector<float>& out, const PreprocessParams& p, int n, int c, int y, int x) {
  const int C = p.out_channels(), H = p.out_height, W = p.out_width;
  const std::size_t i = p.layout == Layout::nchw
                            ? ((static_cast<std::size_t>(n) * C + c) * H + y) * W + x
                            : ((static_cast<std::size_t>(n) * H + y) * W + x) * C + c;
  return out[i] * 255.f;
}

PreprocessParams basic(PixelFormat f, int in_w, int in_h, int out_w, int out_h) {
  PreprocessParams p;
  p.in_format = f;
  p.in_width = in_w;
  p.in_height = in_h;
  p.out_width = out_w;
  p.out_height = out_h;
  return p;
}

// A constant-colour YUV image of the given format.
std::vector<std::uint8_t> const_yuv(PixelFormat f, int w, int h, std::uint8_t y, std::uint8_t u, std::uint8_t v) {
  std::vector<std::uint8_t> img(static_cast<std::size_t>(w) * h, y);
  const std::size_t chroma = static_cast<std::size_t>(w / 2) * (h / 2);
  for (std::size_t i = 0; i < chroma; ++i) {
    if (f == PixelFormat::nv12) {
      img.push_back(u);
      img.push_back(v);
    }
  }
  if (f == PixelFormat::i420) {
    img.insert(img.end(), chroma, u);
    img.insert(img.end(), chroma, v);
  }
  return img;
}

}  // namespace

TEST_CASE("preprocess_cpu: same size bgr8 -> rgb is an exact per-pixel normalisation", "[preprocess]") {
  const int W = 5, H = 3;
  std::vector<std::uint8_t> src(W * H * 3);
  std::mt19937 rng(1);
  for (auto& b : src) b = static_cast<std::uint8_t>(rng() & 0xff);
  PreprocessParams p = basic(PixelFormat::bgr8, W, H, W, H);
  p.out_order = ChannelOrder::rgb;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  std::memcpy(p.mean, mean, sizeof mean);
  std::memcpy(p.std, sd, sizeof sd);

  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    p.layout = layout;
    const auto out = run_f32(p, src);
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        for (int c = 0; c < 3; ++c) {
          const std::uint8_t b = src[(y * W + x) * 3 + (2 - c)];  // rgb channel c is bgr byte 2-c
          const float expected = (static_cast<float>(b) / 255.f - mean[c]) / sd[c];
          const std::size_t i = layout == Layout::nchw ? (c * H + y) * W + x : (y * W + x) * 3 + c;
          INFO("layout " << sluice::to_string(layout) << " x " << x << " y " << y << " c " << c);
          REQUIRE(out[i] == expected);
        }
  }
}

TEST_CASE("preprocess_cpu: 2x2 -> 1x1 is the average of the four pixels", "[preprocess]") {
  // rgb8 pixels (r, g, b): channel averages 25, 100, 175.5.
  const std::vector<std::uint8_t> src = {10, 0, 255, 20, 100, 100, 30, 200, 200, 40, 100, 147};
  PreprocessParams p = basic(PixelFormat::rgb8, 2, 2, 1, 1);
  p.out_order = ChannelOrder::bgr;
  const auto out = run_f32(p, src);
  CHECK(out[0] * 255.f == Approx(175.5f).margin(1e-4));
  CHECK(out[1] * 255.f == Approx(100.f).margin(1e-4));
  CHECK(out[2] * 255.f == Approx(25.f).margin(1e-4));

  PreprocessParams g = basic(PixelFormat::gray8, 2, 2, 1, 1);
  g.out_order = ChannelOrder::gray;
  const auto gout = run_f32(g, {0, 1, 2, 255});
  CHECK(gout[0] * 255.f == Approx(64.5f).margin(1e-4));
}

TEST_CASE("preprocess_cpu: upscale uses half-pixel centres and clamps at the edges", "[preprocess]") {
  // 2 -> 4: sx = -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1).
  PreprocessParams p = basic(PixelFormat::gray8, 2, 1, 4, 1);
  p.out_order = ChannelOrder::gray;
  const auto out = run_f32(p, {100, 200});
  CHECK(out[0] * 255.f == Approx(100.f).margin(1e-4));
  CHECK(out[1] * 255.f == Approx(125.f).margin(1e-4));
  CHECK(out[2] * 255.f == Approx(175.f).margin(1e-4));
  CHECK(out[3] * 255.f == Approx(200.f).margin(1e-4));
}

TEST_CASE("preprocess_cpu: gray8 replicates into colour outputs - colour mixes into gray", "[preprocess]") {
  const std::vector<std::uint8_t> gray = {0, 51, 102, 255};
  PreprocessParams p = basic(PixelFormat::gray8, 2, 2, 2, 2);
  p.out_order = ChannelOrder::bgr;
  p.layout = Layout::nhwc;
  const float mean[3] = {0.1f, 0.2f, 0.3f}, sd[3] = {0.5f, 0.25f, 2.f};
  std::memcpy(p.mean, mean, sizeof mean);
  std::memcpy(p.std, sd, sizeof sd);
  const auto out = run_f32(p, gray);
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 3; ++c) {
      INFO("pixel " << i << " channel " << c);
      CHECK(out[i * 3 + c] == (static_cast<float>(gray[i]) / 255.f - mean[c]) / sd[c]);
    }

  PreprocessParams q = basic(PixelFormat::bgr8, 1, 1, 1, 1);
  q.out_order = ChannelOrder::gray;
  const auto g = run_f32(q, {200, 100, 50});  // b, g, r
  CHECK(g[0] * 255.f == Approx(0.299f * 50 + 0.587f * 100 + 0.114f * 200).margin(1e-4));
}

TEST_CASE("preprocess_cpu: constant YUV gives the hand-computed colour", "[preprocess]") {
  // Y=100, U=150, V=80, computed by hand (see the formulas in preprocess.hpp's contract):
  // bt601 limited: Y'=84*255/219, U'=22*255/224, V'=-48*255/224; bt709 full: Y'=100, U'=22, V'=-48.
  struct Case {
    YuvMatrix m;
    bool full;
    float r, g, b;
  };
  const Case cases[] = {{YuvMatrix::bt601, false, 21.198933f, 128.211887f, 142.187326f},
                        {YuvMatrix::bt709, true, 24.4096f, 118.348824f, 140.8232f}};
  for (PixelFormat f : {PixelFormat::nv12, PixelFormat::i420})
    for (const Case& k : cases) {
      PreprocessParams p = basic(f, 6, 4, 3, 5);
      p.yuv_matrix = k.m;
      p.yuv_full_range = k.full;
      p.out_order = ChannelOrder::rgb;
      const auto out = run_f32(p, const_yuv(f, 6, 4, 100, 150, 80));
      INFO(sluice::to_string(f) << (k.m == YuvMatrix::bt601 ? " bt601" : " bt709") << (k.full ? " full" : " limited"));
      for (int y = 0; y < 5; ++y)
        for (int x = 0; x < 3; ++x) {
          CHECK(at255(out, p, 0, 0, y, x) == Approx(k.r).margin(2e-3));
          CHECK(at255(out, p, 0, 1, y, x) == Approx(k.g).margin(2e-3));
          CHECK(at255(out, p, 0, 2, y, x) == Approx(k.b).margin(2e-3));
        }
    }

  SECTION("converted colour is clamped to 0..255") {
    PreprocessParams p = basic(PixelFormat::nv12, 2, 2, 2, 2);
    const auto hot = run_f32(p, const_yuv(PixelFormat::nv12, 2, 2, 235, 128, 240));  // R = 255 + 178.75
    CHECK(at255(hot, p, 0, 0, 0, 0) == 255.f);
    const auto cold = run_f32(p, const_yuv(PixelFormat::nv12, 2, 2, 16, 16, 128));  // B = 0 - 225.93
    CHECK(at255(cold, p, 0, 2, 0, 0) == 0.f);
  }
}

TEST_CASE("preprocess_cpu: chroma is sampled at its own half-resolution centres", "[preprocess]") {
  // 4x2 nv12 whose chroma row is (U=a, U=b) with V neutral. Same-size output: chroma coordinate
  // (x+0.5)/2-0.5 = -0.25, 0.25, 0.75, 1.25 -> U = a, 0.75a+0.25b, 0.25a+0.75b, b.
  const float a = 100, b = 150;
  const std::vector<std::uint8_t> img = {128, 128, 128, 128, 128, 128, 128, 128, 100, 128, 150, 128};
  PreprocessParams p = basic(PixelFormat::nv12, 4, 2, 4, 2);
  p.yuv_full_range = true;
  p.out_order = ChannelOrder::rgb;
  const auto out = run_f32(p, img);
  const float u[4] = {a, 0.75f * a + 0.25f * b, 0.25f * a + 0.75f * b, b};
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x) {
      INFO("x " << x << " y " << y);
      CHECK(at255(out, p, 0, 2, y, x) == Approx(128.f + 1.772f * (u[x] - 128.f)).margin(1e-3));  // B
      CHECK(at255(out, p, 0, 0, y, x) == Approx(128.f).margin(1e-3));                             // R: V neutral
    }
}

TEST_CASE("preprocess_cpu: each batch item reads its own image and writes its own tensor", "[preprocess]") {
  PreprocessParams p = basic(PixelFormat::gray8, 3, 2, 2, 2);
  p.batch = 3;
  p.out_order = ChannelOrder::rgb;
  std::vector<std::uint8_t> src;
  for (std::uint8_t v : {10, 20, 30}) src.insert(src.end(), 6, v);
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    p.layout = layout;
    const auto out = run_f32(p, src);
    for (int n = 0; n < 3; ++n)
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < 2; ++y)
          for (int x = 0; x < 2; ++x) CHECK(at255(out, p, n, c, y, x) == Approx(10.f * (n + 1)).margin(1e-4));
  }
}

TEST_CASE("preprocess_cpu: f16 output is the f32 output rounded to half", "[preprocess]") {
  for (PixelFormat f : {PixelFormat::bgr8, PixelFormat::gray8, PixelFormat::nv12}) {
    PreprocessParams p = basic(f, 38, 30, 64, 47);
    p.batch = 2;
    p.layout = Layout::nhwc;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    std::memcpy(p.mean, mean, sizeof mean);
    std::memcpy(p.std, sd, sizeof sd);
    std::vector<std::uint8_t> src(sluice::image_bytes(f, 38, 30) * 2);
    std::mt19937 rng(7);
    for (auto& b : src) b = static_cast<std::uint8_t>(rng() & 0xff);

    const auto f32 = run_f32(p, src);
    p.dtype = DType::f16;
    std::vector<std::uint16_t> f16(out_elems(p));
    preprocess_cpu(p, src.data(), f16.data());
    for (std::size_t i = 0; i < f16.size(); ++i) {
      INFO(sluice::to_string(f) << " element " << i);
      REQUIRE(f16[i] == float_to_half_bits(f32[i]));
    }
  }
}

TEST_CASE("preprocess_cpu: crop resizes exactly the chosen region and clamps at its edges", "[preprocess][crop]") {
  // 6x4 gray source with value 10*y + x: every pixel is distinguishable.
  std::vector<std::uint8_t> gray(6 * 4);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 6; ++x) gray[static_cast<std::size_t>(y * 6 + x)] = static_cast<std::uint8_t>(10 * y + x);

  SECTION("same-size output is a copy of the crop") {
    PreprocessParams p = basic(PixelFormat::gray8, 6, 4, 3, 2);
    p.out_order = ChannelOrder::gray;
    p.crop_x = 2;
    p.crop_y = 1;
    p.crop_width = 3;
    p.crop_height = 2;
    const auto out = run_f32(p, gray);
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 3; ++x) {
        INFO("x " << x << " y " << y);
        CHECK(out[static_cast<std::size_t>(y * 3 + x)] == static_cast<float>(10 * (y + 1) + (x + 2)) / 255.f);
      }
  }
  SECTION("width and height 0 reach the right and bottom edges") {
    PreprocessParams p = basic(PixelFormat::gray8, 6, 4, 2, 1);
    p.out_order = ChannelOrder::gray;
    p.crop_x = 4;
    p.crop_y = 3;
    const auto out = run_f32(p, gray);
    CHECK(out[0] * 255.f == Approx(34.f).margin(1e-4));
    CHECK(out[1] * 255.f == Approx(35.f).margin(1e-4));
  }
  SECTION("2x downscale of the crop averages 2x2 blocks inside it") {
    PreprocessParams p = basic(PixelFormat::gray8, 6, 4, 2, 1);
    p.out_order = ChannelOrder::gray;
    p.crop_x = 1;
    p.crop_y = 2;
    p.crop_width = 4;
    p.crop_height = 2;
    const auto out = run_f32(p, gray);
    CHECK(out[0] * 255.f == Approx((21 + 22 + 31 + 32) / 4.f).margin(1e-4));
    CHECK(out[1] * 255.f == Approx((23 + 24 + 33 + 34) / 4.f).margin(1e-4));
  }
  SECTION("upscale clamps to the crop, not to the frame") {
    // Row 100 | 200 cropped out of 0, 100, 200, 50: 2 -> 4 gives 100, 125, 175, 200 (no 0 or 50 bleeding in).
    PreprocessParams p = basic(PixelFormat::gray8, 4, 1, 4, 1);
    p.out_order = ChannelOrder::gray;
    p.crop_x = 1;
    p.crop_width = 2;
    const auto out = run_f32(p, {0, 100, 200, 50});
    CHECK(out[0] * 255.f == Approx(100.f).margin(1e-4));
    CHECK(out[1] * 255.f == Approx(125.f).margin(1e-4));
    CHECK(out[2] * 255.f == Approx(175.f).margin(1e-4));
    CHECK(out[3] * 255.f == Approx(200.f).margin(1e-4));
  }
  SECTION("bgr8 crop keeps the channels of the chosen pixels") {
    std::vector<std::uint8_t> bgr(4 * 3 * 3);
    for (std::size_t i = 0; i < bgr.size(); ++i) bgr[i] = static_cast<std::uint8_t>(7 * i + 1);
    PreprocessParams p = basic(PixelFormat::bgr8, 4, 3, 1, 1);
    p.crop_x = 3;
    p.crop_y = 2;
    p.crop_width = 1;
    p.crop_height = 1;
    const auto out = run_f32(p, bgr);
    const std::size_t px = (2 * 4 + 3) * 3;  // pixel (3, 2)
    CHECK(out[0] == static_cast<float>(bgr[px + 2]) / 255.f);  // r
    CHECK(out[1] == static_cast<float>(bgr[px + 1]) / 255.f);  // g
    CHECK(out[2] == static_cast<float>(bgr[px + 0]) / 255.f);  // b
  }
  SECTION("nv12 crop takes the chroma of its own region") {
    // 8x2 nv12: luma 128, chroma columns U = 60, 90, 170, 200, V = 128. Crop x 4..5 -> chroma column 2 (U=170).
    std::vector<std::uint8_t> img(8 * 2, 128);
    for (std::uint8_t u : {60, 90, 170, 200}) {
      img.push_back(u);
      img.push_back(128);
    }
    PreprocessParams p = basic(PixelFormat::nv12, 8, 2, 2, 2);
    p.yuv_full_range = true;
    p.crop_x = 4;
    p.crop_width = 2;
    const auto out = run_f32(p, img);
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x) {
        INFO("x " << x << " y " << y);
        CHECK(at255(out, p, 0, 2, y, x) == Approx(128.f + 1.772f * (170.f - 128.f)).margin(1e-3));  // B
        CHECK(at255(out, p, 0, 0, y, x) == Approx(128.f).margin(1e-3));                              // R
      }
  }
}

TEST_CASE("preprocess_geometry: letterbox sizes and offsets", "[preprocess][letterbox]") {
  auto geo = [](int in_w, int in_h, int out_w, int out_h) {
    PreprocessParams p = basic(PixelFormat::bgr8, in_w, in_h, out_w, out_h);
    p.letterbox = true;
    return preprocess_geometry(p);
  };
  auto g = geo(1920, 1080, 640, 640);  // 640 x 360 at y 140
  CHECK((g.img_x == 0 && g.img_y == 140 && g.img_w == 640 && g.img_h == 360));
  g = geo(1080, 1920, 640, 640);  // portrait: 360 x 640 at x 140
  CHECK((g.img_x == 140 && g.img_y == 0 && g.img_w == 360 && g.img_h == 640));
  g = geo(10, 5, 5, 5);  // 5 x 2.5 -> 5 x 3 (halves round up) at y floor(2/2) = 1
  CHECK((g.img_x == 0 && g.img_y == 1 && g.img_w == 5 && g.img_h == 3));
  g = geo(640, 480, 301, 199);  // scale min(301/640, 199/480) = 199/480: 265.33 -> 265 x 199 at x 18
  CHECK((g.img_x == 18 && g.img_y == 0 && g.img_w == 265 && g.img_h == 199));
  g = geo(1000, 1, 4, 4);  // 4 x 0.004 -> at least 1 row, at y 1
  CHECK((g.img_x == 0 && g.img_y == 1 && g.img_w == 4 && g.img_h == 1));
  g = geo(64, 48, 64, 48);  // same aspect: no border
  CHECK((g.img_x == 0 && g.img_y == 0 && g.img_w == 64 && g.img_h == 48));

  PreprocessParams p = basic(PixelFormat::bgr8, 1920, 1080, 640, 640);
  p.crop_x = 420;
  p.crop_width = 1080;  // a square crop fills a square output
  p.letterbox = true;
  g = preprocess_geometry(p);
  CHECK((g.crop_x == 420 && g.crop_w == 1080 && g.crop_h == 1080 && g.img_w == 640 && g.img_h == 640));
  p.letterbox = false;
  p.crop_width = 0;  // to the right edge
  g = preprocess_geometry(p);
  CHECK((g.crop_w == 1500 && g.crop_h == 1080 && g.img_x == 0 && g.img_y == 0 && g.img_w == 640 && g.img_h == 640));
}

TEST_CASE("preprocess_cpu: letterbox of a 2:1 image into a square pads above and below", "[preprocess][letterbox]") {
  const int W = 8, H = 4, S = 8;  // 8x4 -> 8x8: image 8x4 at y 2, pad rows 0-1 and 6-7
  std::vector<std::uint8_t> src(W * H * 3);
  std::mt19937 rng(3);
  for (auto& b : src) b = static_cast<std::uint8_t>(rng() & 0xff);
  PreprocessParams p = basic(PixelFormat::bgr8, W, H, S, S);
  p.letterbox = true;
  p.pad_value = 114.f;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  std::memcpy(p.mean, mean, sizeof mean);
  std::memcpy(p.std, sd, sizeof sd);
  for (Layout layout : {Layout::nchw, Layout::nhwc}) {
    p.layout = layout;
    const auto out = run_f32(p, src);
    for (int y = 0; y < S; ++y)
      for (int x = 0; x < S; ++x)
        for (int c = 0; c < 3; ++c) {
          const std::size_t i = layout == Layout::nchw ? static_cast<std::size_t>((c * S + y) * S + x)
                                                       : static_cast<std::size_t>((y * S + x) * 3 + c);
          const bool pad = y < 2 || y >= 6;
          // Inside: a same-size copy of the source (rgb channel c is bgr byte 2 - c).
          const float v = pad ? 114.f : static_cast<float>(src[static_cast<std::size_t>(((y - 2) * W + x) * 3 + 2 - c)]);
          INFO(sluice::to_string(layout) << " x " << x << " y " << y << " c " << c);
          REQUIRE(out[i] == (v / 255.f - mean[c]) / sd[c]);
        }
  }

  SECTION("a tall image gets side bars, and the image is resized to the letterbox size") {
    // 2x8 gray -> 4x4: image 1x4 at x 1 (2 * 4/8 = 1); its pixels average the two source columns and two rows.
    std::vector<std::uint8_t> g(2 * 8);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<std::uint8_t>(10 * i);
    PreprocessParams q = basic(PixelFormat::gray8, 2, 8, 4, 4);
    q.out_order = ChannelOrder::gray;
    q.letterbox = true;
    q.pad_value = 0.f;
    q.mean[0] = 0.5f;
    q.std[0] = 0.25f;
    const auto out = run_f32(q, g);
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x) {
        INFO("x " << x << " y " << y);
        const float got = out[static_cast<std::size_t>(y * 4 + x)];
        if (x != 1) {
          CHECK(got == (0.f / 255.f - 0.5f) / 0.25f);
        } else {  // rows 2y, 2y+1, columns 0 and 1: (10*(4y) + 10*(4y+1) + 10*(4y+2) + 10*(4y+3)) / 4
          CHECK((got * 0.25f + 0.5f) * 255.f == Approx(10.f * (4 * y) + 15.f).margin(1e-3));
        }
      }
  }
  SECTION("yuv letterbox: constant colour inside, pad outside") {
    PreprocessParams q = basic(PixelFormat::i420, 8, 4, 6, 6);  // image 6x3 at y 1
    q.letterbox = true;
    q.pad_value = 20.f;
    q.yuv_full_range = true;
    const auto out = run_f32(q, const_yuv(PixelFormat::i420, 8, 4, 90, 128, 128));  // gray 90
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 6; ++x)
        for (int c = 0; c < 3; ++c) {
          INFO("x " << x << " y " << y << " c " << c);
          CHECK(at255(out, q, 0, c, y, x) == Approx(y >= 1 && y < 4 ? 90.f : 20.f).margin(1e-3));
        }
  }
}

TEST_CASE("bf16 conversion: known values, ties to even, round trips", "[preprocess][half]") {
  auto bits = [](std::uint32_t u) {
    float f = 0.f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  };
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(float_to_bf16_bits(1.0f) == 0x3F80);
  CHECK(float_to_bf16_bits(-2.0f) == 0xC000);
  CHECK(float_to_bf16_bits(3.0f) == 0x4040);
  CHECK(float_to_bf16_bits(0.0f) == 0x0000);
  CHECK(float_to_bf16_bits(-0.0f) == 0x8000);
  CHECK(float_to_bf16_bits(0.1f) == 0x3DCD);                 // 0x3DCCCCCD: lower half 0xCCCD > 0x8000, up
  CHECK(float_to_bf16_bits(bits(0x3F808000u)) == 0x3F80);    // 1 + 2^-8: tie, to even (down)
  CHECK(float_to_bf16_bits(bits(0x3F818000u)) == 0x3F82);    // 1 + 3*2^-8: tie, to even (up)
  CHECK(float_to_bf16_bits(bits(0x3F808001u)) == 0x3F81);    // just above the tie: up
  CHECK(float_to_bf16_bits(bits(0x3F807FFFu)) == 0x3F80);    // just below the tie: down
  CHECK(float_to_bf16_bits(bits(0xBF818000u)) == 0xBF82);    // negative tie, to even
  CHECK(float_to_bf16_bits(bits(0x7F7F7FFFu)) == 0x7F7F);    // largest finite bf16 stays finite
  CHECK(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to inf
  CHECK(float_to_bf16_bits(bits(0x00000001u)) == 0x0000);    // smallest float subnormal: down to 0
  CHECK(float_to_bf16_bits(bits(0x00018000u)) == 0x0002);    // subnormal tie, to even (up)
  CHECK(float_to_bf16_bits(bits(0x00008000u)) == 0x0000);    // subnormal tie, to even (down)
  CHECK(float_to_bf16_bits(inf) == 0x7F80);
  CHECK(float_to_bf16_bits(-inf) == 0xFF80);
  const std::uint16_t nan_bits = float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan_bits & 0x7F80) == 0x7F80);
  CHECK((nan_bits & 0x007F) != 0);
  CHECK((float_to_bf16_bits(bits(0x7F800001u)) & 0x007F) != 0);  // a nan whose payload is all in the low half

  CHECK(bf16_bits_to_float(0x3F80) == 1.0f);
  CHECK(bf16_bits_to_float(0xC040) == -3.0f);
  CHECK(bf16_bits_to_float(0x7F80) == inf);
  CHECK(std::isnan(bf16_bits_to_float(0x7FC0)));
  CHECK(std::signbit(bf16_bits_to_float(0x8000)));

  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const bool is_nan = (h & 0x7F80) == 0x7F80 && (h & 0x007F) != 0;
    if (is_nan) continue;
    INFO("bf16 bits " << h);
    REQUIRE(float_to_bf16_bits(bf16_bits_to_float(static_cast<std::uint16_t>(h))) == h);
  }
}

TEST_CASE("preprocess_cpu: bf16 output is the f32 output rounded to bf16", "[preprocess]") {
  PreprocessParams p = basic(PixelFormat::nv12, 38, 30, 17, 23);
  p.batch = 2;
  p.crop_x = 2;
  p.crop_y = 4;
  p.crop_width = 30;
  p.crop_height = 20;
  p.letterbox = true;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  std::memcpy(p.mean, mean, sizeof mean);
  std::memcpy(p.std, sd, sizeof sd);
  std::vector<std::uint8_t> src(sluice::image_bytes(p.in_format, 38, 30) * 2);
  std::mt19937 rng(11);
  for (auto& b : src) b = static_cast<std::uint8_t>(rng() & 0xff);
  const auto f32 = run_f32(p, src);
  p.dtype = DType::bf16;
  std::vector<std::uint16_t> bf(out_elems(p));
  preprocess_cpu(p, src.data(), bf.data());
  for (std::size_t i = 0; i < bf.size(); ++i) {
    INFO("element " << i);
    REQUIRE(bf[i] == float_to_bf16_bits(f32[i]));
  }
  CHECK(sluice::dtype_bytes(DType::bf16) == 2);
  CHECK(sluice::to_string(DType::bf16) == "bf16");
  CHECK(sluice::parse_dtype("bf16") == DType::bf16);
}

TEST_CASE("half conversion: known values and round trips", "[preprocess][half]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(float_to_half_bits(1.0f) == 0x3C00);
  CHECK(float_to_half_bits(-2.0f) == 0xC000);
  CHECK(float_to_half_bits(0.0f) == 0x0000);
  CHECK(float_to_half_bits(-0.0f) == 0x8000);
  CHECK(float_to_half_bits(65504.f) == 0x7BFF);            // largest finite half
  CHECK(float_to_half_bits(65519.f) == 0x7BFF);            // just below the rounding point
  CHECK(float_to_half_bits(65520.f) == 0x7C00);            // tie rounds to even: inf
  CHECK(float_to_half_bits(std::ldexp(1.f, -24)) == 0x0001);  // smallest subnormal
  CHECK(float_to_half_bits(std::ldexp(1.f, -25)) == 0x0000);  // tie to even: zero
  CHECK(float_to_half_bits(std::ldexp(3.f, -26)) == 0x0001);  // 0.75 units: rounds up
  CHECK(float_to_half_bits(std::ldexp(3.f, -25)) == 0x0002);  // 1.5 units: tie to even 2
  CHECK(float_to_half_bits(std::ldexp(1023.f, -24)) == 0x03FF);  // largest subnormal
  CHECK(float_to_half_bits(std::ldexp(1.f, -14)) == 0x0400);     // smallest normal
  CHECK(float_to_half_bits(1.f + std::ldexp(1.f, -11)) == 0x3C00);      // tie to even (down)
  CHECK(float_to_half_bits(1.f + std::ldexp(3.f, -11)) == 0x3C02);      // tie to even (up)
  CHECK(float_to_half_bits(0.1f) == 0x2E66);
  CHECK(float_to_half_bits(inf) == 0x7C00);
  CHECK(float_to_half_bits(-inf) == 0xFC00);
  CHECK(float_to_half_bits(1e10f) == 0x7C00);
  const std::uint16_t nan_bits = float_to_half_bits(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan_bits & 0x7C00) == 0x7C00);
  CHECK((nan_bits & 0x03FF) != 0);

  CHECK(half_bits_to_float(0x3C00) == 1.0f);
  CHECK(half_bits_to_float(0x7BFF) == 65504.f);
  CHECK(half_bits_to_float(0x0001) == std::ldexp(1.f, -24));
  CHECK(half_bits_to_float(0x8001) == -std::ldexp(1.f, -24));
  CHECK(half_bits_to_float(0x7C00) == inf);
  CHECK(half_bits_to_float(0xFC00) == -inf);
  CHECK(std::isnan(half_bits_to_float(0x7E00)));
  CHECK(std::signbit(half_bits_to_float(0x8000)));

  // Every non-nan half survives half -> float -> half.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0;
    if (is_nan) continue;
    INFO("half bits " << h);
    REQUIRE(float_to_half_bits(half_bits_to_float(static_cast<std::uint16_t>(h))) == h);
  }
}

TEST_CASE("preprocess_cpu: invalid params throw naming the problem", "[preprocess]") {
  const std::vector<std::uint8_t> src(64 * 64 * 3);
  std::vector<float> dst(64 * 64 * 3);
  auto throws = [&](const PreprocessParams& p, const char* what) {
    INFO("expecting a message containing: " << what);
    CHECK_THROWS_AS(preprocess_cpu(p, src.data(), dst.data()), std::invalid_argument);
    CHECK_THROWS_WITH(preprocess_cpu(p, src.data(), dst.data()), Catch::Matchers::Contains(what));
    CHECK_THROWS_AS(validate(p), std::invalid_argument);
  };
  const PreprocessParams ok = basic(PixelFormat::bgr8, 8, 8, 4, 4);
  REQUIRE_NOTHROW(preprocess_cpu(ok, src.data(), dst.data()));

  PreprocessParams p = ok;
  p.batch = 0;
  throws(p, "batch must be positive");
  p = ok;
  p.in_width = -1;
  throws(p, "input size must be positive");
  p = ok;
  p.out_height = 0;
  throws(p, "output size must be positive");
  p = ok;
  p.in_format = PixelFormat::nv12;
  p.in_width = 7;
  throws(p, "nv12 input needs even width and height (got 7x8)");
  p = ok;
  p.in_format = PixelFormat::i420;
  p.in_height = 5;
  throws(p, "i420 input needs even width and height");
  p = ok;
  p.dtype = DType::u8;
  throws(p, "dtype must be f32, f16 or bf16 (got u8)");
  p = ok;
  p.crop_x = -1;
  throws(p, "crop [-1, 0, 0, 0]: values must not be negative");
  p = ok;
  p.crop_x = 4;
  p.crop_width = 5;  // 4 + 5 > 8
  throws(p, "crop [4, 0, 5, 0] does not fit inside the 8x8 input");
  p = ok;
  p.crop_y = 8;  // height 0 = to the bottom edge: nothing left
  throws(p, "crop [0, 8, 0, 0] does not fit inside the 8x8 input");
  p = ok;
  p.in_format = PixelFormat::nv12;
  p.crop_x = 1;
  p.crop_width = 4;
  throws(p, "nv12 input needs an even crop origin and size (got crop [1, 0, 4, 0]");
  p = ok;
  p.in_format = PixelFormat::i420;
  p.crop_y = 2;
  p.crop_height = 3;
  throws(p, "i420 input needs an even crop origin and size");
  p = ok;
  p.in_format = PixelFormat::nv12;
  p.crop_x = 2;  // even origin, but the width left to the edge is 8 - 2 = 6: fine
  CHECK_NOTHROW(validate(p));
  p.crop_x = 3;
  throws(p, "even crop origin");
  p = ok;
  p.pad_value = 256.f;
  throws(p, "pad_value must be in 0..255");
  p.pad_value = std::numeric_limits<float>::quiet_NaN();
  throws(p, "pad_value must be in 0..255");
  p = ok;
  p.std[1] = 0.f;
  throws(p, "std[1] must be non-zero");
  p = ok;
  p.std[2] = std::numeric_limits<float>::infinity();
  throws(p, "std[2]");
  p = ok;
  p.mean[0] = std::numeric_limits<float>::quiet_NaN();
  throws(p, "mean[0] must be finite");
  p = ok;
  p.out_width = kPreprocessMaxDim + 1;
  throws(p, "sizes above");

  // Gray output uses only channel 0, so an unused std[1] of 0 is fine.
  p = ok;
  p.out_order = ChannelOrder::gray;
  p.std[1] = 0.f;
  CHECK_NOTHROW(preprocess_cpu(p, src.data(), dst.data()));

  CHECK_THROWS_AS(preprocess_cpu(ok, nullptr, dst.data()), std::invalid_argument);
  CHECK_THROWS_WITH(preprocess_cpu(ok, nullptr, dst.data()), Catch::Matchers::Contains("null"));
}
