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
  throws(p, "dtype must be f32 or f16 (got u8)");
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
