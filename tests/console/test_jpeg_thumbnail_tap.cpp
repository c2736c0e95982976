// The console's thumbnails on the CPU (media/jpeg_thumbnail_tap.hpp): nothing is converted while nobody watches,
// a watched source's frame comes back as a JPEG of the scaled picture, a frame is kept only once asked for again and
// at most one per interval, and frames a sink drew win over the source's.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "media/jpeg_thumbnail_tap.hpp"

using namespace sluice;

namespace {

struct Picture {
  std::vector<std::byte> bytes;
  FrameTarget target(int w, int h) { return {bytes.data(), w, h, PixelFormat::bgr8}; }
};

Picture solid(int w, int h, std::uint8_t b, std::uint8_t g, std::uint8_t r) {
  Picture p;
  p.bytes.resize(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < p.bytes.size(); i += 3) {
    p.bytes[i] = std::byte{b};
    p.bytes[i + 1] = std::byte{g};
    p.bytes[i + 2] = std::byte{r};
  }
  return p;
}

FrameMeta meta(std::uint32_t source, std::uint64_t sequence) {
  FrameMeta m;
  m.source_id = source;
  m.sequence = sequence;
  return m;
}

cv::Mat decode(const std::string& jpeg) {
  return cv::imdecode(cv::Mat(1, static_cast<int>(jpeg.size()), CV_8UC1, const_cast<char*>(jpeg.data())), cv::IMREAD_COLOR);
}

JpegThumbnailTap::Settings fast() {
  JpegThumbnailTap::Settings s;
  s.min_interval = std::chrono::milliseconds(0);
  return s;
}

}  // namespace

TEST_CASE("thumbnail tap keeps nothing while nobody watches") {
  JpegThumbnailTap tap(fast());
  Picture red = solid(64, 48, 0, 0, 255);
  for (std::uint64_t i = 0; i < 10; ++i) tap.put(meta(1, i), red.target(64, 48));
  CHECK(tap.frames_kept() == 0);
  CHECK(tap.watched() == 0);
  CHECK_FALSE(tap.jpeg(1).has_value());  // asking starts the watch; the next frame is kept
  CHECK(tap.watched() == 1);
  tap.put(meta(2, 0), red.target(64, 48));  // another source: still not watched
  CHECK(tap.frames_kept() == 0);
}

TEST_CASE("thumbnail tap gives a watched source's last frame as a scaled JPEG") {
  JpegThumbnailTap::Settings s = fast();
  s.max_side = 320;
  JpegThumbnailTap tap(s);
  CHECK_FALSE(tap.jpeg(7).has_value());
  Picture red = solid(640, 480, 0, 0, 255), green = solid(640, 480, 0, 255, 0);
  tap.put(meta(7, 0), red.target(640, 480));
  tap.put(meta(7, 1), green.target(640, 480));  // nobody asked since the red one: not kept
  CHECK(tap.jpeg(7)->sequence == 0);
  CHECK(tap.frames_kept() == 1);
  tap.put(meta(7, 2), green.target(640, 480));
  const auto picture = tap.jpeg(7);
  REQUIRE(picture.has_value());
  CHECK(picture->sequence == 2);
  CHECK_FALSE(picture->drawn);
  const cv::Mat image = decode(picture->jpeg);
  REQUIRE(image.cols == 320);
  REQUIRE(image.rows == 240);
  const cv::Vec3b centre = image.at<cv::Vec3b>(120, 160);
  CHECK(centre[1] > 200);
  CHECK(centre[2] < 50);
  CHECK(tap.jpeg(7)->jpeg == picture->jpeg);  // the same frame is encoded once
}

TEST_CASE("thumbnail tap keeps at most one frame per interval") {
  JpegThumbnailTap::Settings s;
  s.min_interval = std::chrono::milliseconds(60'000);
  JpegThumbnailTap tap(s);
  tap.jpeg(1);
  Picture red = solid(32, 32, 0, 0, 255);
  for (std::uint64_t i = 0; i < 5; ++i) tap.put(meta(1, i), red.target(32, 32));
  CHECK(tap.frames_kept() == 1);
  CHECK(tap.jpeg(1)->sequence == 0);
}

TEST_CASE("thumbnail tap shows drawn frames instead of the source's") {
  JpegThumbnailTap tap(fast());
  tap.jpeg(1);
  Picture raw = solid(64, 64, 0, 0, 255), drawn = solid(64, 64, 255, 0, 0);
  tap.put(meta(1, 0), raw.target(64, 64));
  CHECK_FALSE(tap.jpeg(1)->drawn);
  tap.put_drawn(meta(1, 0), drawn.target(64, 64));
  tap.jpeg(1);
  tap.put(meta(1, 1), raw.target(64, 64));  // the source's next frame: not shown, a drawn one is coming
  const auto picture = tap.jpeg(1);
  REQUIRE(picture.has_value());
  CHECK(picture->drawn);
  CHECK(picture->sequence == 0);
  CHECK(decode(picture->jpeg).at<cv::Vec3b>(32, 32)[0] > 200);
}

TEST_CASE("thumbnail tap bounds the sources clients may ask for") {
  JpegThumbnailTap::Settings s = fast();
  s.max_sources = 4;
  JpegThumbnailTap tap(s);
  for (std::uint32_t id = 0; id < 100; ++id) tap.jpeg(id);
  CHECK(tap.watched() == 4);
}
