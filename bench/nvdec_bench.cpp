// The NVDEC bound: N sources decoding one Annex-B file at once (one thread and one decoder session each, the
// file fed L times in a row), every picture converted into device memory (nv12 or bgr8 at the native size, or
// the surface copied as it is) and nothing copied to the host: what the decoders deliver into GPU memory.
//
//   sluice_nvdec_bench FILE SOURCES LOOPS [native|nv12|bgr8]
//
// Prints one JSON line: frames, seconds, frames/s in total and per source, host CPU cores used (process CPU clock).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "media/nvdec/annexb.hpp"
#include "media/nvdec/nvdec_decoder.hpp"
#include "runtime/gpu.hpp"
#include "runtime/stats.hpp"

using namespace sluice;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s FILE SOURCES LOOPS [native|nv12|bgr8] [stream|reopen|pool]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const int sources = std::atoi(argv[2]), loops = std::atoi(argv[3]);
  const std::string mode = argc > 4 ? argv[4] : "nv12";
  // stream: one session per source fed the file LOOPS times as one stream; reopen: a new session per loop (an
  // input after another, each its own decoder); pool: per loop a session from NvdecDecoder::take, given back
  // at its end (what the reader does).
  const std::string sessions = argc > 5 ? argv[5] : "stream";
  if (const std::string why = nvdec_unavailable_reason(); !why.empty()) {
    std::fprintf(stderr, "NVDEC unavailable: %s\n", why.c_str());
    return 1;
  }
  gpu::set_device(0);
  std::vector<std::uint64_t> frames(static_cast<std::size_t>(sources), 0), failed(frames.size(), 0);
  std::vector<std::string> errors(frames.size());
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int s = 0; s < sources; ++s)
    threads.emplace_back([&, s] {
      try {
        const auto i = static_cast<std::size_t>(s);
        std::unique_ptr<AnnexBFile> file = std::make_unique<AnnexBFile>(path);
        std::unique_ptr<NvdecDecoder> decoder =
            sessions == "pool" ? NvdecDecoder::take(file->codec()) : std::make_unique<NvdecDecoder>(file->codec());
        void* out = gpu::device_alloc(std::size_t{64} << 20);  // at start, never in the loop
        std::vector<std::uint8_t> nal;
        const auto drain = [&] {
          while (decoder->has_frame()) {
            const NvdecSequence& seq = decoder->sequence();
            const NvdecOutput o{mode == "native", mode == "bgr8" ? PixelFormat::bgr8 : PixelFormat::nv12, seq.width,
                                seq.height};
            const NvdecFrame f = decoder->pop_to_device(static_cast<std::uint8_t*>(out), std::size_t{64} << 20, o);
            (f.error.empty() ? frames[i] : failed[i])++;
          }
        };
        for (int l = 0; l < loops; ++l) {
          if (l) {
            file = std::make_unique<AnnexBFile>(path);
            if (sessions != "stream") {
              decoder->finish();
              drain();
              if (sessions == "pool") {
                NvdecDecoder::give_back(std::move(decoder));
                decoder = NvdecDecoder::take(file->codec());
              } else {
                decoder = std::make_unique<NvdecDecoder>(file->codec());
              }
            }
          }
          while (file->next(nal)) {
            decoder->feed(nal.data(), nal.size());
            drain();
          }
        }
        decoder->finish();
        drain();
        gpu::device_free(out);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(s)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cores = (process_cpu_seconds() - cpu0) / seconds;
  std::uint64_t total = 0, total_failed = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    total += frames[i];
    total_failed += failed[i];
    if (!errors[i].empty()) std::fprintf(stderr, "source %zu: %s\n", i, errors[i].c_str());
  }
  std::printf("{\"file\": \"%s\", \"sessions\": \"%s\", \"mode\": \"%s\", \"sources\": %d, \"loops\": %d, \"frames\": %llu, \"failed\": %llu, "
              "\"seconds\": %.3f, \"fps\": %.1f, \"fps_per_source\": %.1f, \"cpu_cores\": %.2f}\n",
              path.c_str(), sessions.c_str(), mode.c_str(), sources, loops, static_cast<unsigned long long>(total),
              static_cast<unsigned long long>(total_failed), seconds, total / seconds, total / seconds / sources, cores);
  for (const auto& e : errors)
    if (!e.empty()) return 1;
  return 0;
}
