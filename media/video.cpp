#include "media/video.hpp"

#include <memory>
#include <string>

#include "media/libav_log.hpp"
#include "media/libav_reader.hpp"
#include "runtime/frame_reader.hpp"
#if SLUICE_WITH_CUDA
#include "media/nvdec/container_reader.hpp"
#endif

namespace sluice {

void register_video_readers(ReaderRegistry& readers) {
  route_libav_logging();  // FFmpeg's own lines through sluice's logger, rate-limited per input
  readers.add(InputKind::file, open_libav_file_reader);
#if SLUICE_WITH_CUDA
  readers.add_gpu(InputKind::file, open_nvdec_container_reader);
  readers.add_gpu(InputKind::stream, open_nvdec_stream_reader);
#else
  const auto without_cuda = [](const std::string&, const ReaderOptions&, std::string& why) {
    why = "NVDEC unavailable: this sluiced was built without CUDA";
    return std::unique_ptr<FrameReader>();
  };
  readers.add_gpu(InputKind::file, without_cuda);
  readers.add_gpu(InputKind::stream, without_cuda);
#endif
  readers.add(InputKind::stream, open_libav_stream_reader);
}
SLUICE_REGISTER_READERS(register_video_readers);

}  // namespace sluice
