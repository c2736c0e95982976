// The FFmpeg part of the media library, in every build (media/video.hpp): video files through libavcodec with
// the container's timestamps (against ffprobe's, stored in tests/data/nvdec/X.pts), NVDEC declined with its
// reason where it cannot serve a file (no CUDA, no driver or GPU), and what a build without OpenCV says for
// the inputs that need it. NVDEC itself: tests/gpu/test_container_gpu.cpp.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "media/video.hpp"
#include "runtime/frame_reader.hpp"
#include "tests/pipeline_helpers.hpp"
#include "tests/video_reference.hpp"
#if SLUICE_WITH_CUDA
#include "media/nvdec/nvdec_decoder.hpp"
#endif

using namespace sluice;
using namespace sluice::test;

namespace {

std::vector<std::int64_t> read_pts(FrameReader& reader, int width, int height, ReadStatus& last) {
  std::vector<std::byte> frame(image_bytes(PixelFormat::gray8, width, height));
  std::vector<std::int64_t> pts;
  std::string why;
  while ((last = reader.read(FrameTarget{frame.data(), width, height, PixelFormat::gray8}, why)) == ReadStatus::frame)
    pts.push_back(reader.pts_ns().value_or(-1));
  INFO(why);
  return pts;
}

std::string nvdec_missing() {
#if SLUICE_WITH_CUDA
  return nvdec_unavailable_reason();
#else
  return "this sluiced was built without CUDA";
#endif
}

// A registry of the video readers alone: other tests put fakes into the global one.
const ReaderRegistry& video_readers() {
  static const ReaderRegistry* const readers = [] {
    auto* r = new ReaderRegistry;
    register_video_readers(*r);
    return r;
  }();
  return *readers;
}

}  // namespace

TEST_CASE("video files in containers decode on libavcodec with ffprobe's timestamps", "[video]") {
  struct Clip {
    const char* name;
    int width, height;
    std::size_t frames;
  };
  for (const Clip& c : {Clip{"h264_320x240.mp4", 320, 240, 30}, Clip{"hevc_320x240.mkv", 320, 240, 30},
                        Clip{"vfr_160x120.mp4", 160, 120, 40}}) {
    INFO(c.name);
    ReaderOptions options;
    options.decoder = DecoderChoice::cpu;
    auto reader = video_readers().open(InputKind::file, clip(c.name), options);
    CHECK(reader->info().backend.rfind("libavcodec", 0) == 0);
    CHECK(reader->info().width == c.width);
    ReadStatus last{};
    const std::vector<std::int64_t> pts = read_pts(*reader, c.width, c.height, last);
    CHECK(last == ReadStatus::end);
    CHECK(pts.size() == c.frames);
    CHECK(pts == read_pts_ns(clip(std::string(c.name) + ".pts")));
  }
}

TEST_CASE("without a usable NVDEC, video files go to libavcodec (auto) or fail with the reason (gpu)", "[video]") {
  const std::string missing = nvdec_missing();
  if (missing.empty()) return;  // NVDEC serves them here: tests/gpu/test_container_gpu.cpp
  const std::string path = clip("h264_320x240.mp4");
  ReaderOptions options;
  const ReaderRegistry& readers = video_readers();
  CHECK(readers.open(InputKind::file, path, options)->info().backend == "libavcodec h264");
  options.decoder = DecoderChoice::gpu;
  CHECK_THROWS_WITH(readers.open(InputKind::file, path, options),
                    Catch::Contains("'" + path + "': decoder: gpu, but NVDEC unavailable: " + missing));
  // A rotated video: turned upright by the CPU decoder.
  options.decoder = DecoderChoice::automatic;
  auto rotated = readers.open(InputKind::file, clip("rot90_160x96.mp4"), options);
  CHECK(rotated->info().width == 96);
  CHECK(rotated->info().height == 160);
}

TEST_CASE("an input kind nobody registered names what it needs", "[video]") {
  ReaderRegistry registry;  // as in a GPU-host build for OpenCV's kinds
  const ReaderOptions options;
  CHECK_THROWS_WITH(registry.open(InputKind::image, "a.png", options), Catch::Contains("needs OpenCV imgcodecs"));
  CHECK_THROWS_WITH(registry.open(InputKind::image_sequence, "a_%04d.png", options),
                    Catch::Contains("needs OpenCV imgcodecs"));
  CHECK_THROWS_WITH(registry.open(InputKind::camera, "/dev/video0", options), Catch::Contains("needs OpenCV videoio"));
  CHECK_THROWS_WITH(registry.open(InputKind::stream, "rtsp://x/y", options), Catch::Contains("needs the FFmpeg readers"));
}
