// The NVDEC bound: N sources decoding one Annex-B file at once (one thread and one decoder session each, the
// file fed L times in a row), every picture converted into device memory (nv12 or bgr8 at the native size, or
// the surface copied as it is) and nothing copied to the host: what the decoders deliver into GPU memory.
//
//   sluice_nvdec_bench FILE SOURCES LOOPS [native|nv12|bgr8] [stream|reopen|pool] [DISPLAY_DELAY] [PACE_FPS] [nal|au]
//                      [KNOB=VALUE ...]
//
// DISPLAY_DELAY: pictures the parser holds back (default 4, files; live streams use 0). PACE_FPS: each source
// feeds its pictures at this rate, like a camera (default 0: as fast as the decoders take them). nal: NAL units
// are fed one by one (an Annex-B file's reader); au: whole access units, each marked complete (a demuxer's
// packets, what network streams and containers feed).
// Knobs (NvdecTuning, nvdec_decoder.hpp; default first): creation=cuvid|cuda|default, extra_surfaces=0..,
// output_surfaces=2 (1..8), lock=0|1, unmap=sync|deferred; feeders=0 (NvdecDecoder::limit_concurrent_feeds:
// at most this many threads in the parser at once, 0 no limit).
// Prints one JSON line: frames, seconds, frames/s in total and per source, host CPU cores used (process CPU clock),
// and per decoded frame the host CPU and wall microseconds of each step of the session (NvdecCosts).
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

namespace {

// The offset of a NAL unit's header (after its start code), or the unit's size when it has none.
std::size_t header_at(const std::vector<std::uint8_t>& nal) {
  std::size_t i = 0;
  while (i < nal.size() && nal[i] == 0) ++i;
  return i < nal.size() && nal[i] == 1 ? i + 1 : nal.size();
}

// A slice: H.264 types 1-5, HEVC VCL types 0-31.
bool is_slice(VideoCodec codec, const std::vector<std::uint8_t>& nal) {
  const std::size_t i = header_at(nal);
  if (i >= nal.size()) return false;
  if (codec == VideoCodec::hevc) return ((nal[i] >> 1) & 0x3f) < 32;
  const int type = nal[i] & 0x1f;
  return type >= 1 && type <= 5;
}

// The NAL unit that begins a picture: a slice whose first slice-header bit says "first in the picture" (H.264
// first_mb_in_slice = 0, coded as a single 1 bit; HEVC first_slice_segment_in_pic_flag, after a two-byte header).
bool starts_picture(VideoCodec codec, const std::vector<std::uint8_t>& nal) {
  if (!is_slice(codec, nal)) return false;
  const std::size_t first_bit = header_at(nal) + (codec == VideoCodec::hevc ? 2 : 1);
  return first_bit < nal.size() && (nal[first_bit] & 0x80) != 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s FILE SOURCES LOOPS [native|nv12|bgr8] [stream|reopen|pool] [DISPLAY_DELAY] [PACE_FPS] [nal|au] [KNOB=VALUE ...]\n",
                 argv[0]);
    return 2;
  }
  NvdecTuning tuning;
  int feeders = 0;
  std::string knobs;
  for (int a = 9; a < argc; ++a) {
    const std::string arg = argv[a];
    const auto eq = arg.find('=');
    const std::string key = arg.substr(0, eq), value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (key == "creation" && (value == "cuvid" || value == "cuda" || value == "default"))
      tuning.creation = value == "cuvid" ? NvdecTuning::Creation::cuvid
                        : value == "cuda" ? NvdecTuning::Creation::cuda
                                          : NvdecTuning::Creation::driver_default;
    else if (key == "extra_surfaces") tuning.extra_decode_surfaces = std::atoi(value.c_str());
    else if (key == "output_surfaces") tuning.output_surfaces = std::atoi(value.c_str());
    else if (key == "lock" && (value == "0" || value == "1")) tuning.context_lock = value == "1";
    else if (key == "unmap" && (value == "sync" || value == "deferred")) tuning.deferred_unmap = value == "deferred";
    else if (key == "feeders") feeders = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "unknown knob %s (creation=cuvid|cuda|default extra_surfaces=N output_surfaces=N lock=0|1 "
                           "unmap=sync|deferred feeders=N)\n", arg.c_str());
      return 2;
    }
    knobs += (knobs.empty() ? "" : " ") + arg;
  }
  NvdecDecoder::limit_concurrent_feeds(feeders);
  const std::string path = argv[1];
  const int sources = std::atoi(argv[2]), loops = std::atoi(argv[3]);
  const std::string mode = argc > 4 ? argv[4] : "nv12";
  // stream: one session per source fed the file LOOPS times as one stream; reopen: a new session per loop (an
  // input after another, each its own decoder); pool: per loop a session from NvdecDecoder::take, given back
  // at its end (what the reader does).
  const std::string sessions = argc > 5 ? argv[5] : "stream";
  const int delay = argc > 6 ? std::atoi(argv[6]) : kNvdecFileDisplayDelay;
  const double pace_fps = argc > 7 ? std::atof(argv[7]) : 0;
  const std::string feed = argc > 8 ? argv[8] : "nal";
  if (delay < 0 || delay > 16 || pace_fps < 0 || (feed != "nal" && feed != "au")) {
    std::fprintf(stderr, "DISPLAY_DELAY must be 0..16, PACE_FPS >= 0 and the feed nal or au\n");
    return 2;
  }
  if (const std::string why = nvdec_unavailable_reason(); !why.empty()) {
    std::fprintf(stderr, "NVDEC unavailable: %s\n", why.c_str());
    return 1;
  }
  gpu::set_device(0);
  std::vector<std::uint64_t> frames(static_cast<std::size_t>(sources), 0), failed(frames.size(), 0);
  std::vector<std::string> errors(frames.size());
  std::vector<NvdecCosts> costs(frames.size());
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int s = 0; s < sources; ++s)
    threads.emplace_back([&, s] {
      try {
        const auto i = static_cast<std::size_t>(s);
        std::unique_ptr<AnnexBFile> file = std::make_unique<AnnexBFile>(path);
        std::unique_ptr<NvdecDecoder> decoder = sessions == "pool"
                                                    ? NvdecDecoder::take(file->codec(), delay)
                                                    : std::make_unique<NvdecDecoder>(file->codec(), delay, tuning);
        decoder->measure_costs(&costs[i]);
        // Paced: the next access unit is fed once its picture is due (sources start spread over one period).
        const auto start = std::chrono::steady_clock::now() +
                           std::chrono::duration<double>(pace_fps > 0 ? s / (pace_fps * sources) : 0);
        std::uint64_t fed_pictures = 0;
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
                decoder = std::make_unique<NvdecDecoder>(file->codec(), kNvdecFileDisplayDelay, tuning);
              }
            }
          }
          // au: the NAL units before a picture's first slice belong to it (parameter sets, SEI), those after
          // it up to the next such group too; an access unit is fed once the next one begins.
          std::vector<std::uint8_t> unit;
          bool unit_has_picture = false;
          const auto feed_unit = [&] {
            if (unit.empty()) return;
            decoder->feed(unit.data(), unit.size(), std::nullopt, unit_has_picture);
            unit.clear();
            unit_has_picture = false;
            drain();
          };
          while (file->next(nal)) {
            const bool first_slice = starts_picture(file->codec(), nal);
            if (feed == "au" && unit_has_picture && (first_slice || !is_slice(file->codec(), nal))) feed_unit();
            if (pace_fps > 0 && first_slice)
              std::this_thread::sleep_until(start + std::chrono::duration<double>(fed_pictures++ / pace_fps));
            if (feed == "au") {
              unit.insert(unit.end(), nal.begin(), nal.end());
              unit_has_picture = unit_has_picture || first_slice;
              continue;
            }
            decoder->feed(nal.data(), nal.size());
            drain();
          }
          feed_unit();
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
  NvdecCosts all;
  for (const NvdecCosts& c : costs)
    for (auto [sum, part] : {std::pair{&all.context, &c.context}, {&all.feed, &c.feed}, {&all.decode, &c.decode}, {&all.map, &c.map},
                             {&all.copy, &c.copy}, {&all.unmap, &c.unmap}, {&all.pop, &c.pop}}) {
      sum->cpu_ns += part->cpu_ns;
      sum->wall_ns += part->wall_ns;
      sum->calls += part->calls;
    }
  // The parser's own share: feed less the callbacks' steps it ran.
  NvdecCosts::Step parse = all.feed;
  for (const NvdecCosts::Step* inner : {&all.decode, &all.map, &all.copy, &all.unmap}) {
    parse.cpu_ns -= inner->cpu_ns;
    parse.wall_ns -= inner->wall_ns;
  }
  const double per_frame = total + total_failed > 0 ? 1e-3 / static_cast<double>(total + total_failed) : 0;
  std::printf("{\"per_frame_us\": {");
  const char* sep = "";
  for (auto [name, step] : {std::pair{"context", &all.context}, {"parse", &parse}, {"decode", &all.decode}, {"map", &all.map}, {"copy", &all.copy},
                            {"unmap", &all.unmap}, {"pop", &all.pop}}) {
    std::printf("%s\"%s\": {\"cpu\": %.1f, \"wall\": %.1f}", sep, name, step->cpu_ns * per_frame,
                step->wall_ns * per_frame);
    sep = ", ";
  }
  std::printf("}, \"delay\": %d, \"pace_fps\": %.1f, \"feed\": \"%s\", \"knobs\": \"%s\"}\n", delay, pace_fps, feed.c_str(),
              knobs.c_str());
  for (const auto& e : errors)
    if (!e.empty()) return 1;
  return 0;
}
