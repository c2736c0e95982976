// The frame tap: every pixel format against a direct OpenCV conversion, the test source's YUV read back as the
// colours it was rendered from, eviction of the oldest frame when full, and take() freeing its slot.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "media/scaled_frame_tap.hpp"
#include "stages/testsrc.hpp"

using namespace sluice;

namespace {

FrameMeta meta(std::uint64_t sequence, std::uint32_t source = 0) {
  FrameMeta m;
  m.source_id = source;
  m.sequence = sequence;
  return m;
}

// What the tap should hold: the frame converted to BGR at its own size, then scaled (INTER_AREA when both
// sides shrink, else INTER_LINEAR).
cv::Mat reference(PixelFormat pixel, const std::vector<std::byte>& data, int w, int h, cv::Size to) {
  void* p = const_cast<std::byte*>(data.data());
  cv::Mat bgr;
  switch (pixel) {
    case PixelFormat::bgr8: bgr = cv::Mat(h, w, CV_8UC3, p).clone(); break;
    case PixelFormat::rgb8: cv::cvtColor(cv::Mat(h, w, CV_8UC3, p), bgr, cv::COLOR_RGB2BGR); break;
    case PixelFormat::gray8: cv::cvtColor(cv::Mat(h, w, CV_8UC1, p), bgr, cv::COLOR_GRAY2BGR); break;
    case PixelFormat::nv12: cv::cvtColor(cv::Mat(h * 3 / 2, w, CV_8UC1, p), bgr, cv::COLOR_YUV2BGR_NV12); break;
    case PixelFormat::i420: cv::cvtColor(cv::Mat(h * 3 / 2, w, CV_8UC1, p), bgr, cv::COLOR_YUV2BGR_I420); break;
  }
  if (bgr.size() == to) return bgr;
  cv::Mat out;
  cv::resize(bgr, out, to, 0, 0, w >= to.width && h >= to.height ? cv::INTER_AREA : cv::INTER_LINEAR);
  return out;
}

double max_abs_diff(const cv::Mat& a, const std::vector<std::uint8_t>& b) {
  const cv::Mat bm(a.rows, a.cols, CV_8UC3, const_cast<std::uint8_t*>(b.data()));
  return cv::norm(a, bm, cv::NORM_INF);
}

}  // namespace

TEST_CASE("frame tap converts every pixel format as OpenCV does and scales to its size", "[frame_tap]") {
  const int w = 64, h = 48;
  std::mt19937 rng(7);
  for (const PixelFormat pixel :
       {PixelFormat::bgr8, PixelFormat::rgb8, PixelFormat::gray8, PixelFormat::nv12, PixelFormat::i420}) {
    std::vector<std::byte> frame(image_bytes(pixel, w, h));
    for (auto& b : frame) b = static_cast<std::byte>(rng() & 0xff);
    for (const cv::Size size : {cv::Size(w, h), cv::Size(32, 24), cv::Size(100, 70), cv::Size(40, 60)}) {
      INFO("format " << to_string(pixel) << " to " << size.width << "x" << size.height);
      ScaledFrameTap tap(size.width, size.height, 2);
      tap.put(meta(5), FrameTarget{frame.data(), w, h, pixel});
      std::vector<std::uint8_t> got;
      REQUIRE(tap.take(0, 5, got));
      REQUIRE(got.size() == static_cast<std::size_t>(size.area()) * 3);
      // Scaling before a channel swap or gray expansion (what the tap does for rgb8/gray8) equals scaling
      // after it; allow one level for rounding in OpenCV's per-channel-count code paths.
      CHECK(max_abs_diff(reference(pixel, frame, w, h, size), got) <= 1);
    }
  }
}

TEST_CASE("frame tap reads the test source's YUV back as the colours it rendered", "[frame_tap]") {
  // The test source writes BT.601 limited range; OpenCV's YUV2BGR_NV12/I420 read it the same way.
  const int w = 160, h = 96;
  std::vector<std::byte> bgr(image_bytes(PixelFormat::bgr8, w, h));
  TestPatternRenderer(TestPattern::bars, PixelFormat::bgr8, w, h, 1).render(0, bgr.data());
  ScaledFrameTap tap(w, h, 4);
  std::vector<std::uint8_t> direct, via_yuv;
  tap.put(meta(0), FrameTarget{bgr.data(), w, h, PixelFormat::bgr8});
  REQUIRE(tap.take(0, 0, direct));
  for (const PixelFormat pixel : {PixelFormat::nv12, PixelFormat::i420}) {
    INFO("format " << to_string(pixel));
    std::vector<std::byte> yuv(image_bytes(pixel, w, h));
    TestPatternRenderer(TestPattern::bars, pixel, w, h, 1).render(0, yuv.data());
    tap.put(meta(1), FrameTarget{yuv.data(), w, h, pixel});
    REQUIRE(tap.take(0, 1, via_yuv));
    // Inside each bar (away from the chroma-subsampled edges) the colour survives within a few levels.
    int worst = 0;
    for (int bar = 0; bar < 8; ++bar) {
      const int x = bar * w / 8 + w / 16, y = h / 2;
      for (int c = 0; c < 3; ++c) {
        const auto i = static_cast<std::size_t>((y * w + x) * 3 + c);
        worst = std::max(worst, std::abs(int(direct[i]) - int(via_yuv[i])));
      }
    }
    CHECK(worst <= 3);
  }
}

TEST_CASE("frame tap evicts the oldest frame when full", "[frame_tap]") {
  const int w = 8, h = 6;
  std::vector<std::byte> frame(image_bytes(PixelFormat::bgr8, w, h));
  ScaledFrameTap tap(w, h, 3);
  for (std::uint64_t seq = 0; seq < 5; ++seq) {
    std::fill(frame.begin(), frame.end(), static_cast<std::byte>(seq * 10));
    tap.put(meta(seq), FrameTarget{frame.data(), w, h, PixelFormat::bgr8});
  }
  CHECK(tap.evicted() == 2);
  CHECK(tap.size() == 3);
  std::vector<std::uint8_t> got;
  CHECK_FALSE(tap.take(0, 0, got));
  CHECK_FALSE(tap.take(0, 1, got));
  for (std::uint64_t seq = 2; seq < 5; ++seq) {
    REQUIRE(tap.take(0, seq, got));
    CHECK(got[0] == seq * 10);
  }
  CHECK_FALSE(tap.take(1, 2, got));  // another source's sequence 2 was never put
}

TEST_CASE("frame tap take frees the slot for the next frame", "[frame_tap]") {
  const int w = 8, h = 6;
  std::vector<std::byte> frame(image_bytes(PixelFormat::gray8, w, h));
  ScaledFrameTap tap(w, h, 2);
  tap.put(meta(0, 1), FrameTarget{frame.data(), w, h, PixelFormat::gray8});
  tap.put(meta(0, 2), FrameTarget{frame.data(), w, h, PixelFormat::gray8});  // same sequence, other source
  CHECK(tap.size() == 2);
  std::vector<std::uint8_t> got;
  REQUIRE(tap.take(1, 0, got));
  CHECK(tap.size() == 1);
  CHECK_FALSE(tap.take(1, 0, got));  // taken once only
  tap.put(meta(1, 1), FrameTarget{frame.data(), w, h, PixelFormat::gray8});
  CHECK(tap.evicted() == 0);  // it went into the freed slot
  CHECK(tap.take(2, 0, got));
  CHECK(tap.take(1, 1, got));
  CHECK(tap.size() == 0);
}
