#include "media/nvdec/annexb_reader.hpp"

#include <memory>
#include <string>
#include <vector>

#include "media/nvdec/annexb.hpp"
#include "runtime/frame_reader.hpp"
#include "runtime/utf8.hpp"
#if SLUICE_WITH_CUDA
#include "media/nvdec/nvdec_decoder.hpp"
#endif

namespace sluice {

#if SLUICE_WITH_CUDA
namespace {

// Bytes read at open at most before the first decoded picture must have appeared.
constexpr std::uint64_t kMaxBytesBeforeFirstPicture = std::uint64_t{32} << 20;

class NvdecReader final : public FrameReader {
 public:
  NvdecReader(const std::string& uri, std::unique_ptr<AnnexBFile> file, bool device_frames)
      : file_(std::move(file)), session_(NvdecDecoder::take(file_->codec())), decoder_(*session_),
        device_frames_(device_frames) {
    info_.uri = uri;
    info_.kind = InputKind::file;
    info_.backend = std::string("NVDEC ") + (file_->codec() == VideoCodec::hevc ? "HEVC" : "H.264");
    // Up to the first decoded picture, so the size, the frame rate and a decodable stream are known here.
    std::string why;
    while (!decoder_.has_frame() && !eof_) {
      if (!feed_next(why)) throw InputError("'" + to_valid_utf8(uri) + "': " + why);
      if (file_->bytes_read() > kMaxBytesBeforeFirstPicture && !decoder_.has_frame())
        throw InputError("'" + to_valid_utf8(uri) + "': no decodable picture in its first 32 MiB");
    }
    if (!decoder_.has_frame() && decoder_.sequence().count == 0)
      throw InputError("'" + to_valid_utf8(uri) + "': no " + std::string(to_string(file_->codec())) +
                       " sequence header (SPS) in the stream");
    info_.width = decoder_.sequence().width;
    info_.height = decoder_.sequence().height;
    info_.fps = decoder_.sequence().fps;
  }

  ReadStatus read(const FrameTarget& target, std::string& why) override {
    try {
      while (!decoder_.has_frame()) {
        if (finished_) return ReadStatus::end;
        if (!feed_next(why)) return ReadStatus::error;
      }
      const NvdecOutput out{false, target.pixel, target.width, target.height};
      auto* dst = reinterpret_cast<std::uint8_t*>(target.data);
      const std::size_t bytes = image_bytes(target.pixel, target.width, target.height);
      const NvdecFrame f = target.device ? decoder_.pop_to_device(dst, bytes, out, target.reusable, target.written)
                                         : decoder_.pop_to_host(dst, bytes, out);
      if (!f.error.empty()) {
        why = f.error;
        return ReadStatus::failed;
      }
      return ReadStatus::frame;
    } catch (const std::exception& e) {
      why = e.what();
      failed_ = true;
      return ReadStatus::error;
    }
  }

  ~NvdecReader() override {
    // A stream read to its clean end leaves a session the next input of this codec can take over.
    if (finished_ && !failed_ && !decoder_.has_frame()) NvdecDecoder::give_back(std::move(session_));
  }

  const InputInfo& info() const override { return info_; }
  bool writes_device_memory() const override { return device_frames_; }

 private:
  // Feeds the next NAL unit, or the end of the stream; false with `why` when decoding cannot go on.
  bool feed_next(std::string& why) {
    try {
      if (!eof_ && file_->next(nal_)) {
        decoder_.feed(nal_.data(), nal_.size());
        return true;
      }
      eof_ = true;
      if (!finished_) {
        finished_ = true;
        decoder_.finish();
      }
      return true;
    } catch (const std::exception& e) {
      why = e.what();
      eof_ = finished_ = failed_ = true;
      return false;
    }
  }

  std::unique_ptr<AnnexBFile> file_;
  std::unique_ptr<NvdecDecoder> session_;
  NvdecDecoder& decoder_;
  InputInfo info_;
  bool device_frames_;
  std::vector<std::uint8_t> nal_;
  bool eof_ = false, finished_ = false, failed_ = false;
};

}  // namespace
#endif

void register_annexb_reader(ReaderRegistry& registry) {
  std::vector<std::string> exts;
  for (const auto e : annexb_extensions()) exts.emplace_back(e);
  registry.add_for_extensions(
      exts, [](const std::string& uri, const ReaderOptions& options, std::string& why) -> std::unique_ptr<FrameReader> {
        if (options.decoder == "cpu") {
          why = "decoder: cpu";
          return nullptr;
        }
#if SLUICE_WITH_CUDA
        if (const std::string reason = nvdec_unavailable_reason(); !reason.empty()) {
          why = "NVDEC unavailable: " + reason;
          if (options.decoder == "gpu") throw InputError("'" + to_valid_utf8(uri) + "': decoder: gpu, but " + why);
          return nullptr;
        }
        auto file = std::make_unique<AnnexBFile>(uri);
        if (const std::string reason = nvdec_codec_unsupported_reason(file->codec(), 8); !reason.empty()) {
          why = "NVDEC unavailable: " + reason;
          if (options.decoder == "gpu") throw InputError("'" + to_valid_utf8(uri) + "': decoder: gpu, but " + why);
          return nullptr;
        }
        if (options.fit != Fit::stretch) {
          // The GPU conversion scales each axis on its own; letterbox and crop are the CPU decoder's.
          why = "NVDEC unavailable: fit: " + std::string(to_string(options.fit)) + " is done by the CPU decoder";
          if (options.decoder == "gpu") throw InputError("'" + to_valid_utf8(uri) + "': decoder: gpu, but " + why);
          return nullptr;
        }
        return std::make_unique<NvdecReader>(uri, std::move(file), options.device_frames);
#else
        why = "NVDEC unavailable: this sluiced was built without CUDA";
        if (options.decoder == "gpu") throw InputError("'" + to_valid_utf8(uri) + "': decoder: gpu, but " + why);
        return nullptr;
#endif
      });
}

}  // namespace sluice
