#include "media/nvdec/nvdec_reader.hpp"

#if SLUICE_WITH_CUDA
#include <exception>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "media/nvdec/nvdec_decoder.hpp"
#include "runtime/arrival_times.hpp"
#include "runtime/stats.hpp"
#include "runtime/utf8.hpp"

namespace sluice {
namespace {

// Bytes read at open at most before the first decoded picture must have appeared.
constexpr std::uint64_t kMaxBytesBeforeFirstPicture = std::uint64_t{32} << 20;

class NvdecReader final : public FrameReader {
 public:
  NvdecReader(const std::string& uri, std::unique_ptr<CodedSource> source, const NvdecReaderOptions& options)
      : source_(std::move(source)),
        session_(NvdecDecoder::take(source_->codec(), options.live ? kNvdecLiveDisplayDelay : kNvdecFileDisplayDelay)),
        decoder_(*session_),
        options_(options) {
    info_.uri = uri;
    info_.kind = options.live ? InputKind::stream : InputKind::file;
    info_.backend = options.backend;
    info_.frames_total = options.frames_total;
    // Up to the first decoded picture, so the size, the frame rate and a decodable stream are known here.
    std::string why;
    while (!decoder_.has_frame() && !eof_) {
      if (!feed_next(why)) throw InputError("'" + shown_uri(uri) + "': " + why);
      if (source_->bytes_read() > kMaxBytesBeforeFirstPicture && !decoder_.has_frame())
        throw InputError("'" + shown_uri(uri) + "': no decodable picture in its first 32 MiB");
    }
    if (!decoder_.has_frame() && decoder_.sequence().count == 0)
      throw InputError("'" + shown_uri(uri) + "': no " + std::string(to_string(source_->codec())) +
                       " sequence header (SPS) in the stream");
    const bool sideways = (quarter_turns() & 1) != 0;  // the upright picture's size
    info_.width = sideways ? decoder_.sequence().height : decoder_.sequence().width;
    info_.height = sideways ? decoder_.sequence().width : decoder_.sequence().height;
    info_.fps = options.fps > 0 ? options.fps : decoder_.sequence().fps;
  }

  ReadStatus read(const FrameTarget& target, std::string& why) override {
    try {
      while (!decoder_.has_frame()) {
        if (finished_) return ended(why);
        if (!feed_next(why)) return ReadStatus::error;
      }
      const NvdecOutput out{false, target.pixel, target.width, target.height, options_.fit, quarter_turns()};
      auto* dst = reinterpret_cast<std::uint8_t*>(target.data);
      const std::size_t bytes = image_bytes(target.pixel, target.width, target.height);
      const NvdecFrame f = target.device ? decoder_.pop_to_device(dst, bytes, out, target.reusable, target.written)
                                         : decoder_.pop_to_host(dst, bytes, out);
      ++pictures_;
      pts_ns_ = f.pts_ns;
      arrived_ns_ = options_.live && f.pts_ns ? arrivals_.take(*f.pts_ns) : std::nullopt;
      if (!f.error.empty()) {
        why = f.error;
        if (options_.live) resync_after(why);
        return ReadStatus::failed;
      }
      if (options_.live && untrusted(f.pts_ns)) {
        why = "no keyframe since " + resync_reason_ + ": its references are lost";
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
    // A stream read to its clean end leaves a session the next input of this codec takes over (a directory job
    // would otherwise create a decoder per file, which stalls every other session too).
    if (finished_ && !failed_ && !decoder_.has_frame()) NvdecDecoder::give_back(std::move(session_));
  }

  const InputInfo& info() const override { return info_; }
  std::optional<std::int64_t> pts_ns() const override { return pts_ns_; }
  std::optional<std::int64_t> arrived_ns() const override { return arrived_ns_; }
  bool writes_device_memory() const override { return options_.device_frames; }

 private:
  int quarter_turns() const { return ((options_.rotation % 360 + 360) % 360) / 90; }

  // Feeds the next chunk, or the end of the stream; false with `why` when decoding cannot go on.
  bool feed_next(std::string& why) {
    try {
      CodedChunk chunk;
      if (!eof_ && source_->next(chunk)) {
        if (options_.live) {
          track_trust(chunk);
          if (chunk.pts_ns) arrivals_.note(*chunk.pts_ns, now_ns());
        }
        decoder_.feed(chunk.bytes.data(), chunk.bytes.size(), chunk.pts_ns, chunk.whole_picture);
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

  // Live streams: from a damaged packet or a corrupt picture on, access units fed before the next keyframe are
  // not trusted. Pictures are matched by their presentation time; without one, by count.
  void resync_after(const std::string& reason) {
    if (!resyncing_) resync_reason_ = reason;
    resyncing_ = true;
  }
  void track_trust(const CodedChunk& chunk) {
    if (chunk.keyframe && !chunk.damaged) resyncing_ = false;
    else if (chunk.damaged) resync_after("a damaged packet");
    if (!resyncing_) return;
    if (chunk.pts_ns) {
      if (untrusted_pts_.size() < kMaxUntrusted) untrusted_pts_.insert(*chunk.pts_ns);
    } else {
      ++untrusted_without_pts_;
    }
  }
  bool untrusted(const std::optional<std::int64_t>& pts) {
    if (pts) return untrusted_pts_.erase(*pts) != 0;
    if (untrusted_without_pts_ == 0) return false;
    --untrusted_without_pts_;
    return true;
  }

  // Every picture is out: the end, unless the container announced more pictures than came or the bytes ended
  // early.
  ReadStatus ended(std::string& why) const {
    if (options_.frames_required > 0 && pictures_ < options_.frames_required) {
      const std::string detail = source_->end_detail();
      why = fmt::format("ended after {} of {} frames (truncated or corrupt{})", pictures_, options_.frames_total,
                        detail.empty() ? "" : ": " + detail);
      return ReadStatus::error;
    }
    // The container shows the file goes on past its bytes, or a read failed (media/demux.hpp ended_early()).
    if (const std::string detail = source_->end_detail(); !detail.empty()) {
      why = fmt::format("ended early after {} frames (truncated or corrupt): {}", pictures_, detail);
      return ReadStatus::error;
    }
    return ReadStatus::end;
  }

  std::unique_ptr<CodedSource> source_;
  std::unique_ptr<NvdecDecoder> session_;
  NvdecDecoder& decoder_;
  NvdecReaderOptions options_;
  InputInfo info_;
  std::optional<std::int64_t> pts_ns_;
  ArrivalTimes arrivals_;  // live: when each packet came (its frame's latency counts from there)
  std::optional<std::int64_t> arrived_ns_;
  std::int64_t pictures_ = 0;
  bool eof_ = false, finished_ = false, failed_ = false;
  static constexpr std::size_t kMaxUntrusted = 4096;  // a stream without keyframes cannot grow it without bound
  bool resyncing_ = false;
  std::string resync_reason_;
  std::set<std::int64_t> untrusted_pts_;
  std::int64_t untrusted_without_pts_ = 0;
};

}  // namespace

std::unique_ptr<FrameReader> open_nvdec_reader(const std::string& uri, std::unique_ptr<CodedSource> source,
                                               const NvdecReaderOptions& options) {
  return std::make_unique<NvdecReader>(uri, std::move(source), options);
}

}  // namespace sluice
#endif
