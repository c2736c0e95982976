#include "media/libav_reader.hpp"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
}

#include "media/demux.hpp"
#include "media/file_checks.hpp"
#include "media/frame_scaler.hpp"
#include "runtime/arrival_times.hpp"
#include "runtime/stats.hpp"
#include "runtime/utf8.hpp"

namespace sluice {
namespace {

// Packets the decoder may reject in a row before the input counts as undecodable.
constexpr int kRejectedInARow = 256;
// The largest picture a stream may announce (8K is 33 Mpixel): a hostile header cannot make the decoder
// allocate gigabytes per frame.
constexpr std::int64_t kMaxPixels = 8192LL * 8192LL;

class LibavReader final : public FrameReader {
 public:
  LibavReader(const std::string& uri, InputKind kind, const ReaderOptions& o) : fit_(o.fit), live_(is_live(kind)) {
    demux_ = std::make_unique<Demuxer>(uri, demux_options(o, uri, !is_live(kind)));
    const LibavLogScope scope(demux_->log());
    open_decoder(uri, o);
    frame_ = av_frame_alloc();
    if (frame_ == nullptr) throw std::bad_alloc();
    info_.uri = uri;
    info_.kind = kind;
    info_.frames_total = live_ ? -1 : demux_->frames_announced();
    info_.fps = demux_->fps();
    const AVCodecParameters& par = demux_->codec_parameters();
    const bool sideways = demux_->rotation() % 180 != 0;
    info_.width = sideways ? par.height : par.width;
    info_.height = sideways ? par.width : par.height;
    info_.backend = std::string("libavcodec ") + codec_->codec->name;
    frame_period_ns_ = static_cast<std::int64_t>(1e9 / (info_.fps > 0 ? info_.fps : 30.0));
  }

  ~LibavReader() override {
    av_frame_free(&frame_);
    avcodec_free_context(&codec_);
  }

  const InputInfo& info() const override { return info_; }
  std::optional<std::int64_t> pts_ns() const override { return pts_ns_; }
  std::optional<std::int64_t> arrived_ns() const override { return arrived_ns_; }
  bool failed_transiently() const override { return transient_; }

  ReadStatus read(const FrameTarget& target, std::string& why) override {
    if (done_) return ReadStatus::end;
    const LibavLogScope scope(demux_->log());
    try {
      std::string error;
      const ReadStatus s = decode_next(error);
      if (s == ReadStatus::frame) {
        stamp();
        if (live_ && !trusted(why)) {
          av_frame_unref(frame_);
          ++frames_read_;
          return ReadStatus::failed;
        }
        scaler_.convert(*frame_, demux_->rotation(), fit_, target);
        av_frame_unref(frame_);
        ++frames_read_;
        return ReadStatus::frame;
      }
      done_ = true;
      if (s == ReadStatus::error) {
        why = error;
        return ReadStatus::error;
      }
      return ended(why);
    } catch (const std::exception& e) {  // a target the scaler refuses, no memory
      av_frame_unref(frame_);
      done_ = true;
      why = live_ ? std::string("stream frame could not be converted: ") + e.what()
                  : "frame " + std::to_string(frames_read_ + 1) + ": " + e.what();
      return ReadStatus::error;
    }
  }

 private:
  [[noreturn]] static void fail(const std::string& uri, const std::string& why) {
    throw InputError("'" + shown_uri(uri) + "': " + why);
  }

  void open_decoder(const std::string& uri, const ReaderOptions& o) {
    const AVCodecParameters& par = demux_->codec_parameters();
    const AVCodec* decoder = avcodec_find_decoder(par.codec_id);
    if (decoder == nullptr)
      fail(uri, std::string("not a video FFmpeg can decode (this FFmpeg has no decoder for ") +
                    avcodec_get_name(par.codec_id) + ")");
    if (static_cast<std::int64_t>(par.width) * par.height > kMaxPixels)
      fail(uri, fmt::format("not a video sluice decodes: {}x{} pictures are larger than 8192x8192", par.width,
                            par.height));
    codec_ = avcodec_alloc_context3(decoder);
    if (codec_ == nullptr) throw std::bad_alloc();
    codec_->opaque = &demux_->log();  // its frame threads' lines are this input's too (freed before demux_)
    int err = avcodec_parameters_to_context(codec_, &par);
    if (err < 0) fail(uri, "cannot set up the decoder: " + av_error_text(err));
    codec_->pkt_timebase = AVRational{demux_->time_base_num(), demux_->time_base_den()};
    codec_->max_pixels = kMaxPixels;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    codec_->thread_count = o.codec_threads > 0 ? o.codec_threads : std::min(cores, live_ ? 4 : 16);
    // Frame threads hold thread_count - 1 pictures back (100 ms at 30 fps with 4): a live picture is decoded by
    // slice threads alone, out as soon as it is in. Files keep both kinds for throughput.
    codec_->thread_type = live_ ? FF_THREAD_SLICE : FF_THREAD_FRAME | FF_THREAD_SLICE;
    err = avcodec_open2(codec_, decoder, nullptr);
    if (err < 0) fail(uri, std::string("cannot start the ") + decoder->name + " decoder: " + av_error_text(err));
  }

  // The next decoded frame into frame_: frame, end (the input and the decoder are drained), or error (live
  // inputs whose read failed; a file that will not decode).
  ReadStatus decode_next(std::string& why) {
    while (true) {
      int err = avcodec_receive_frame(codec_, frame_);
      if (err == 0) {
        rejected_in_a_row_ = 0;
        return ReadStatus::frame;
      }
      if (err == AVERROR_EOF) return ReadStatus::end;
      if (err != AVERROR(EAGAIN)) {  // a frame the decoder could not finish (frame threads report it here)
        if (reject(err, why)) return ReadStatus::error;
        continue;
      }
      if (flushing_) return ReadStatus::end;  // drained; never ask the demuxer again
      std::string demux_why;
      const DemuxStatus s = demux_->read(packet_, demux_why);
      if (s != DemuxStatus::packet) {
        if (s == DemuxStatus::error) {
          read_error_ = demux_why;
          if (live_) {
            why = fmt::format("stream stopped after {} frames ({})", frames_read_, demux_why);
            return ReadStatus::error;
          }
        }
        flushing_ = true;  // the frames the decoder still holds come out first
        avcodec_send_packet(codec_, nullptr);
        continue;
      }
      if (live_) {
        note_damage(packet_);
        if (packet_.pts_ns) arrivals_.note(*packet_.pts_ns, now_ns());
      }
      err = avcodec_send_packet(codec_, packet_.av());
      if (err < 0 && reject(err, why)) return ReadStatus::error;
    }
  }

  // Counts a packet or frame the decoder rejected; true when too many came in a row to go on.
  bool reject(int err, std::string& why) {
    ++rejected_;
    last_rejection_ = av_error_text(err);
    if (++rejected_in_a_row_ < kRejectedInARow) return false;
    why = fmt::format("{} packets in a row could not be decoded after frame {} ({})", rejected_in_a_row_,
                      frames_read_, last_rejection_);
    return true;
  }

  // Live streams: a picture the decoder concealed or decoded without its references fails, and so does every
  // picture after damage (a lost RTP packet, a packet the container flagged, a failed picture) up to the next
  // keyframe or intra picture: they predict from what was lost. Judged in output order, so a picture shown
  // before the keyframe that ends the damage (open GOPs) fails too; one that was already in the decoder when
  // the damage was found may fail with it.
  bool trusted(std::string& why) {
    const bool intra = frame_->key_frame != 0 || frame_->pict_type == AV_PICTURE_TYPE_I;
    if (const std::string damage = damage_of(*frame_); !damage.empty()) {
      why = "the decoder found the picture damaged (" + damage + ")";
      if (!resyncing_) resync_reason_ = "a damaged picture";
      resyncing_ = true;
      return false;
    }
    if (resyncing_ && intra) resyncing_ = false;
    if (!resyncing_) return true;
    why = "no keyframe since " + resync_reason_ + ": its references are lost";
    return false;
  }

  void note_damage(const DemuxPacket& packet) {
    if (packet.rtp_packets_lost == 0 && !packet.corrupt) return;
    rtp_packets_lost_ += packet.rtp_packets_lost;
    if (resyncing_) return;
    resync_reason_ = packet.rtp_packets_lost > 0
                         ? fmt::format("{} lost RTP packet(s) ({} on this connection)", packet.rtp_packets_lost,
                                       rtp_packets_lost_)
                         : std::string("a damaged packet");
    resyncing_ = true;
  }

  // What the decoder says is wrong with a picture ("" when nothing).
  static std::string damage_of(const AVFrame& f) {
    std::string damage;
    const auto add = [&](const char* what) { damage += (damage.empty() ? "" : ", ") + std::string(what); };
    if (f.decode_error_flags & FF_DECODE_ERROR_INVALID_BITSTREAM) add("invalid bitstream");
    if (f.decode_error_flags & FF_DECODE_ERROR_MISSING_REFERENCE) add("a reference is missing");
    if (f.decode_error_flags & FF_DECODE_ERROR_CONCEALMENT_ACTIVE) add("errors concealed");
    if (f.decode_error_flags & FF_DECODE_ERROR_DECODE_SLICES) add("slices missing");
    if (f.flags & AV_FRAME_FLAG_CORRUPT) add("decoded without its references");
    if (damage.empty() && f.decode_error_flags != 0) add("decode errors");
    return damage;
  }

  // The frame's time: the decoder's best effort from the container's timestamps; one frame period after the
  // previous frame where it has none.
  void stamp() {
    std::optional<std::int64_t> ns = demux_->to_ns(frame_->best_effort_timestamp);
    arrived_ns_ = live_ && ns ? arrivals_.take(*ns) : std::nullopt;
    if (!ns) ns = pts_ns_ ? *pts_ns_ + frame_period_ns_ : 0;
    pts_ns_ = ns;
  }

  // The input ended: fine, or short of what it announced, or cut where its container goes on (files), or a stream
  // cut (live).
  ReadStatus ended(std::string& why) {
    std::string details;
    if (!read_error_.empty()) details = read_error_;
    if (rejected_ > 0)
      details += (details.empty() ? "" : "; ") +
                 fmt::format("{} packet(s) could not be decoded: {}", rejected_, last_rejection_);
    if (live_) {
      why = fmt::format("stream stopped after {} frames (the server closed it{})", frames_read_,
                        details.empty() ? "" : ": " + details);
      return ReadStatus::error;
    }
    if (demux_->cut_off()) {  // a remote file that did not come whole
      why = fmt::format("fetching it stopped after {} frames: {}", frames_read_, details);
      transient_ = demux_->cut_off_transiently();
      return ReadStatus::error;
    }
    const std::int64_t total = info_.frames_total;
    if (total > 0 && frames_read_ + truncation_tolerance(total) < total) {
      why = fmt::format("ended after {} of {} frames (truncated or corrupt{})", frames_read_, total,
                        details.empty() ? "" : ": " + details);
      return ReadStatus::error;
    }
    // The container shows the file goes on past its bytes (Demuxer::ended_early()), or a read failed: the frames
    // after it are lost, however many came.
    if (!read_error_.empty()) {
      why = fmt::format("ended early after {} frames (truncated or corrupt): {}", frames_read_, details);
      return ReadStatus::error;
    }
    if (frames_read_ == 0) {
      why = "no frame could be decoded (corrupt, or a codec FFmpeg lacks" + (details.empty() ? "" : ": " + details) +
            ")";
      return ReadStatus::error;
    }
    return ReadStatus::end;
  }

  Fit fit_;
  bool live_;
  std::unique_ptr<Demuxer> demux_;
  AVCodecContext* codec_ = nullptr;
  AVFrame* frame_ = nullptr;
  DemuxPacket packet_;
  FrameScaler scaler_;
  InputInfo info_;
  std::optional<std::int64_t> pts_ns_;
  ArrivalTimes arrivals_;  // live: when each packet came (its frame's latency counts from there)
  std::optional<std::int64_t> arrived_ns_;
  std::int64_t frame_period_ns_ = 0;
  std::int64_t frames_read_ = 0;
  std::int64_t rejected_ = 0;
  int rejected_in_a_row_ = 0;
  std::string last_rejection_, read_error_;
  bool flushing_ = false, done_ = false;
  bool transient_ = false;  // the error read() returned may pass if the input is fetched again (a remote file cut off)
  bool resyncing_ = false;  // live: damage seen, no keyframe since
  std::string resync_reason_;
  std::int64_t rtp_packets_lost_ = 0;  // on this connection
};

}  // namespace

std::unique_ptr<FrameReader> open_libav_file_reader(const std::string& uri, const ReaderOptions& options) {
  if (!is_http_url(uri)) check_readable_file(uri);  // a URL is fetched by the demuxer (a remote file)
  return std::make_unique<LibavReader>(uri, InputKind::file, options);
}

std::unique_ptr<FrameReader> open_libav_stream_reader(const std::string& uri, const ReaderOptions& options) {
  return std::make_unique<LibavReader>(uri, InputKind::stream, options);
}

}  // namespace sluice
