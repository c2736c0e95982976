// decode_bench FILE [SOURCES] [SECONDS] [WIDTHxHEIGHT]: CPU decode rate of a video file through sluice's
// libav reader (media/libav_reader.hpp: libavcodec + libswscale into the target) against OpenCV's VideoCapture
// + the FrameConverter (what sluice's file reader was before), with SOURCES readers at once (one thread each,
// looping over the file), for SECONDS (default 10) each, into bgr8 targets of the given size (default: the
// file's own). Prints frames/s per reader kind and the CPU cores the process used meanwhile.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/videoio.hpp>

#include "media/libav_reader.hpp"
#include "media/opencv_reader.hpp"
#include "runtime/stats.hpp"

using namespace sluice;
using Clock = std::chrono::steady_clock;

namespace {

// One source: decodes the file again and again into its own target until `stop`; counts frames.
void libav_source(const std::string& file, int w, int h, std::atomic<bool>& stop, std::atomic<long>& frames) {
  std::vector<std::byte> bytes(image_bytes(PixelFormat::bgr8, w, h));
  const FrameTarget target{bytes.data(), w, h, PixelFormat::bgr8};
  while (!stop) {
    auto reader = open_libav_file_reader(file, {});
    std::string why;
    while (!stop && reader->read(target, why) == ReadStatus::frame) ++frames;
  }
}

void opencv_source(const std::string& file, int w, int h, std::atomic<bool>& stop, std::atomic<long>& frames) {
  std::vector<std::byte> bytes(image_bytes(PixelFormat::bgr8, w, h));
  const FrameTarget target{bytes.data(), w, h, PixelFormat::bgr8};
  FrameConverter converter;
  cv::Mat frame;
  while (!stop) {
    cv::VideoCapture cap(file, cv::CAP_FFMPEG);
    while (!stop && cap.read(frame)) {
      converter.convert(frame, target);
      ++frames;
    }
  }
}

template <typename Source>
void measure(const char* name, Source source, const std::string& file, int sources, double seconds, int w, int h) {
  std::atomic<bool> stop{false};
  std::atomic<long> frames{0};
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < sources; ++i) threads.emplace_back([&] { source(file, w, h, stop, frames); });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("%-8s sources %2d  %8.1f frames/s  %5.2f cores\n", name, sources, static_cast<double>(frames) / wall,
              (process_cpu_seconds() - cpu0) / wall);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: decode_bench FILE [SOURCES] [SECONDS] [WIDTHxHEIGHT]\n");
    return 2;
  }
  const std::string file = argv[1];
  const int sources = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  const double seconds = argc > 3 ? std::atof(argv[3]) : 10.0;
  int w = 0, h = 0;
  if (argc > 4 && std::sscanf(argv[4], "%dx%d", &w, &h) != 2) w = h = 0;
  try {
    const auto probe = open_libav_file_reader(file, {});
    if (w <= 0 || h <= 0) {
      w = probe->info().width;
      h = probe->info().height;
    }
    std::printf("%s: %dx%d, into bgr8 %dx%d, %g s per run\n", file.c_str(), probe->info().width,
                probe->info().height, w, h, seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    return 1;
  }
  measure("libav", libav_source, file, sources, seconds, w, h);
  measure("opencv", opencv_source, file, sources, seconds, w, h);
  return 0;
}
