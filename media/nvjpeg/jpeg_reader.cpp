#include "media/nvjpeg/jpeg_reader.hpp"

#include <memory>
#include <string>

#include "media/nvjpeg/jpeg_sniff.hpp"
#include "runtime/bounded_file.hpp"
#include "runtime/utf8.hpp"
#if SLUICE_WITH_CUDA
#include "media/nvjpeg/nvjpeg_decoder.hpp"
#endif

namespace sluice {

#if SLUICE_WITH_CUDA
namespace {

// One image, decoded on the GPU when opened (so a file nvJPEG refuses goes to the CPU reader); read() converts
// it into the frame target, on the GPU.
class NvjpegReader final : public FrameReader {
 public:
  NvjpegReader(const std::string& uri, NvjpegDecoderLease decoder, bool device_frames)
      : decoder_(std::move(decoder)), device_frames_(device_frames) {
    info_.uri = uri;
    info_.kind = InputKind::image;
    info_.frames_total = 1;
    info_.width = decoder_->width();
    info_.height = decoder_->height();
    info_.backend = std::string("nvJPEG (") + decoder_->backend() + ")";
  }

  ReadStatus read(const FrameTarget& target, std::string& why) override {
    if (done_) return ReadStatus::end;
    done_ = true;
    try {
      decoder_->convert(target);
      return ReadStatus::frame;
    } catch (const std::exception& e) {
      why = e.what();
      return ReadStatus::error;
    }
  }
  const InputInfo& info() const override { return info_; }
  bool writes_device_memory() const override { return device_frames_; }

 private:
  NvjpegDecoderLease decoder_;
  InputInfo info_;
  bool device_frames_;
  bool done_ = false;
};

}  // namespace
#endif

std::vector<std::string> jpeg_extensions() { return {".jpg", ".jpeg"}; }

void register_jpeg_reader(ReaderRegistry& registry) {
  registry.add_gpu_for_extensions(
      jpeg_extensions(),
      [](const std::string& uri, const ReaderOptions& options, std::string& why) -> std::unique_ptr<FrameReader> {
        auto decline = [&](const std::string& reason) -> std::unique_ptr<FrameReader> {
          why = reason;
          return nullptr;
        };
#if SLUICE_WITH_CUDA
        if (const std::string reason = nvjpeg_unavailable_reason(); !reason.empty())
          return decline("nvJPEG unavailable: " + reason);
        if (options.fit != Fit::stretch)
          return decline("nvJPEG: fit: " + std::string(to_string(options.fit)) + " is done by the CPU image reader");
        std::string bytes;
        try {
          bytes = read_bounded_file(uri, "JPEG image", kMaxJpegFileBytes);
        } catch (const FileReadError& e) {
          return decline(std::string("nvJPEG: ") + e.what());
        }
        const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data());
        const JpegHeader header = sniff_jpeg(data, bytes.size());
        if (!header.problem.empty()) return decline("nvJPEG: " + header.problem);
        if (header.width > kMaxJpegSide || header.height > kMaxJpegSide ||
            static_cast<std::int64_t>(header.width) * header.height > kMaxJpegPixels)
          return decline("nvJPEG: the image is " + std::to_string(header.width) + "x" + std::to_string(header.height) +
                         ", more than is decoded on the GPU (16384 a side, 256 MP)");
        try {
          NvjpegDecoderLease decoder = acquire_nvjpeg_decoder();
          decoder->decode(data, bytes.size(), header.progressive, header.orientation);
          return std::make_unique<NvjpegReader>(uri, std::move(decoder), options.device_frames);
        } catch (const std::exception& e) {
          return decline(std::string("nvJPEG: ") + to_valid_utf8(e.what()));
        }
#else
        (void)uri;
        (void)options;
        return decline("nvJPEG unavailable: this sluiced was built without CUDA");
#endif
      });
}
SLUICE_REGISTER_READERS(register_jpeg_reader);

}  // namespace sluice
