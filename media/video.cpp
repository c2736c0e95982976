#include "media/video.hpp"

#include <mutex>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "media/demux.hpp"
#include "media/libav_reader.hpp"
#include "media/nvdec/annexb.hpp"
#include "runtime/frame_reader.hpp"
#include "runtime/utf8.hpp"
#if SLUICE_WITH_CUDA
#include "media/nvdec/container_reader.hpp"
#endif

namespace sluice {

// Video files: NVDEC over the demuxed container first, else libavcodec with the reason logged once per reason.
// Annex-B elementary files had their own NVDEC reader tried already (registered per extension): whatever
// declined them declines them here too, so they go straight to libavcodec.
std::unique_ptr<FrameReader> open_video_file(const std::string& uri, const ReaderOptions& options) {
  if (codec_from_extension(uri) == VideoCodec::unknown) {
    std::string why;
#if SLUICE_WITH_CUDA
    if (auto reader = open_nvdec_container_reader(uri, options, why)) return reader;
#else
    if (options.decoder == "cpu") {
      why = "decoder: cpu";
    } else {
      why = "NVDEC unavailable: this sluiced was built without CUDA";
      if (options.decoder == "gpu") throw InputError("'" + to_valid_utf8(uri) + "': decoder: gpu, but " + why);
    }
#endif
    static std::mutex mu;
    static std::set<std::string> logged;
    bool first = false;
    {
      std::lock_guard lock(mu);
      first = logged.insert(why).second;
    }
    if (first) spdlog::info("decoding on the CPU: {}", why);
  }
  return open_libav_file_reader(uri, options);
}

void register_video_readers() {
  static std::once_flag once;
  std::call_once(once, [] {
    route_libav_logging();  // FFmpeg's own lines through sluice's logger, rate-limited per input
    auto& readers = ReaderRegistry::global();
    readers.add(InputKind::file, open_video_file);
    // Network streams stay on libavcodec (NVDEC for them: not yet).
    readers.add(InputKind::stream, open_libav_stream_reader);
  });
}

}  // namespace sluice
