#include "media/nvdec/container_reader.hpp"

#include <exception>
#include <utility>

#include <fmt/format.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/pixdesc.h>
}

#include "media/demux.hpp"
#include "media/file_checks.hpp"
#include "media/nvdec/nvdec_decoder.hpp"
#include "media/nvdec/nvdec_reader.hpp"
#include "runtime/utf8.hpp"

namespace sluice {
namespace {

// The packets of the demuxed video stream: one access unit each, Annex-B, with its presentation time.
// A file's read that fails ends it: the pictures held come out, then the file fails with end_detail() (a read
// error, or an end the container shows to be early: Demuxer::ended_early). A live stream's is an error of the
// input (the source reconnects), and so is a remote file's cut off (Demuxer::cut_off).
class DemuxedSource final : public CodedSource {
 public:
  DemuxedSource(std::unique_ptr<Demuxer> demuxer, VideoCodec codec, bool live)
      : demuxer_(std::move(demuxer)), codec_(codec), live_(live) {}
  VideoCodec codec() const override { return codec_; }
  bool next(CodedChunk& chunk) override {
    while (true) {
      std::string why;
      switch (demuxer_->read(packet_, why)) {
        case DemuxStatus::end: return false;
        case DemuxStatus::error:
          if (live_) throw std::runtime_error(why);
          if (demuxer_->cut_off()) throw std::runtime_error("fetching it stopped: " + why);  // a remote file, incomplete
          read_error_ = why;
          return false;
        case DemuxStatus::packet: break;
      }
      if (packet_.data().empty()) continue;  // nothing to decode (side data only)
      chunk.bytes = packet_.data();
      chunk.pts_ns = packet_.pts_ns;
      chunk.keyframe = packet_.keyframe;
      chunk.whole_picture = true;
      chunk.damaged = packet_.corrupt || packet_.rtp_packets_lost > 0;
      bytes_ += chunk.bytes.size();
      return true;
    }
  }
  std::uint64_t bytes_read() const override { return bytes_; }
  std::string end_detail() const override { return read_error_; }

 private:
  std::unique_ptr<Demuxer> demuxer_;
  VideoCodec codec_;
  bool live_;
  DemuxPacket packet_;
  std::uint64_t bytes_ = 0;
  std::string read_error_;
};

// Empty when NVDEC can take this stream; else why not.
std::string unsupported_reason(const Demuxer& demuxer, VideoCodec& codec) {
  const AVCodecParameters& par = demuxer.codec_parameters();
  if (par.codec_id == AV_CODEC_ID_H264) codec = VideoCodec::h264;
  else if (par.codec_id == AV_CODEC_ID_HEVC) codec = VideoCodec::hevc;
  else return fmt::format("{} video is decoded by the CPU decoder (sluice feeds NVDEC H.264 and HEVC)",
                          avcodec_get_name(par.codec_id));
  int depth = 8;
  if (const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(static_cast<AVPixelFormat>(par.format))) {
    if (desc->log2_chroma_w != 1 || desc->log2_chroma_h != 1)
      return fmt::format("{} {} is not 4:2:0 (NVDEC output here is NV12/P016)", to_string(codec), desc->name);
    depth = desc->comp[0].depth;
  }
  if (std::string reason = nvdec_codec_unsupported_reason(codec, depth); !reason.empty()) return reason;
  return {};
}

// Files and live streams alike: the demuxed video on NVDEC, or nullptr with `why`.
std::unique_ptr<FrameReader> open_demuxed(const std::string& uri, const ReaderOptions& options, std::string& why,
                                          bool live) {
  const auto decline = [&](const std::string& reason) -> std::unique_ptr<FrameReader> {
    why = "NVDEC unavailable: " + reason;
    return nullptr;
  };
  if (const std::string reason = nvdec_unavailable_reason(); !reason.empty()) return decline(reason);
  if (!live && !is_http_url(uri)) check_readable_file(uri);  // a URL is fetched by the demuxer (a remote file)
  DemuxOptions d = demux_options(options, uri, !live);
  d.annex_b = true;
  auto demuxer = std::make_unique<Demuxer>(uri, d);  // not a video at all: InputError, as the CPU reader says
  VideoCodec codec = VideoCodec::unknown;
  if (const std::string reason = unsupported_reason(*demuxer, codec); !reason.empty()) return decline(reason);
  NvdecReaderOptions o;
  o.device_frames = options.device_frames;
  o.live = live;
  o.backend = fmt::format("NVDEC {} ({})", codec == VideoCodec::hevc ? "HEVC" : "H.264", demuxer->container());
  o.fps = demuxer->fps();
  o.fit = options.fit;
  o.rotation = demuxer->rotation();
  if (!live) {
    o.frames_total = demuxer->frames_announced();
    if (o.frames_total > 0) o.frames_required = o.frames_total - truncation_tolerance(o.frames_total);
  }
  try {
    return open_nvdec_reader(uri, std::make_unique<DemuxedSource>(std::move(demuxer), codec, live), o);
  } catch (const std::exception& e) {  // the first pictures did not decode on NVDEC: libavcodec may do better
    std::string reason = e.what();
    const std::string prefix = "'" + shown_uri(uri) + "': ";
    if (reason.rfind(prefix, 0) == 0) reason.erase(0, prefix.size());  // the URI is in the caller's message
    return decline("it did not decode: " + reason);
  }
}

}  // namespace

std::unique_ptr<FrameReader> open_nvdec_container_reader(const std::string& uri, const ReaderOptions& options,
                                                         std::string& why) {
  return open_demuxed(uri, options, why, false);
}

std::unique_ptr<FrameReader> open_nvdec_stream_reader(const std::string& uri, const ReaderOptions& options,
                                                      std::string& why) {
  return open_demuxed(uri, options, why, true);
}

}  // namespace sluice
