#include "media/nvdec/annexb_reader.hpp"

#include <memory>
#include <string>
#include <vector>

#include "media/nvdec/annexb.hpp"
#include "media/nvdec/nvdec_reader.hpp"
#include "runtime/frame_reader.hpp"
#if SLUICE_WITH_CUDA
#include "media/nvdec/nvdec_decoder.hpp"
#endif

namespace sluice {

#if SLUICE_WITH_CUDA
namespace {

// An Annex-B file's NAL units, one at a time (no timestamps: the source numbers frames at the stream's rate).
class AnnexBFileSource final : public CodedSource {
 public:
  explicit AnnexBFileSource(std::unique_ptr<AnnexBFile> file) : file_(std::move(file)) {}
  VideoCodec codec() const override { return file_->codec(); }
  bool next(CodedChunk& chunk) override {
    if (!file_->next(nal_)) return false;
    chunk.bytes = nal_;
    chunk.pts_ns.reset();
    return true;
  }
  std::uint64_t bytes_read() const override { return file_->bytes_read(); }

 private:
  std::unique_ptr<AnnexBFile> file_;
  std::vector<std::uint8_t> nal_;
};

}  // namespace
#endif

void register_annexb_reader(ReaderRegistry& registry) {
  std::vector<std::string> exts;
  for (const auto e : annexb_extensions()) exts.emplace_back(e);
  registry.add_gpu_for_extensions(
      exts, [](const std::string& uri, const ReaderOptions& options, std::string& why) -> std::unique_ptr<FrameReader> {
#if SLUICE_WITH_CUDA
        if (const std::string reason = nvdec_unavailable_reason(); !reason.empty()) {
          why = "NVDEC unavailable: " + reason;
          return nullptr;
        }
        auto file = std::make_unique<AnnexBFile>(uri);
        if (const std::string reason = nvdec_codec_unsupported_reason(file->codec(), 8); !reason.empty()) {
          why = "NVDEC unavailable: " + reason;
          return nullptr;
        }
        NvdecReaderOptions o;
        o.device_frames = options.device_frames;
        o.fit = options.fit;
        o.backend = std::string("NVDEC ") + (file->codec() == VideoCodec::hevc ? "HEVC" : "H.264");
        return open_nvdec_reader(uri, std::make_unique<AnnexBFileSource>(std::move(file)), o);
#else
        (void)uri;
        (void)options;
        why = "NVDEC unavailable: this sluiced was built without CUDA";
        return nullptr;
#endif
      });
}
SLUICE_REGISTER_READERS(register_annexb_reader);

}  // namespace sluice
