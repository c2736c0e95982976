#pragma once
// The demux layer both video decoders share: FFmpeg's libavformat over a file, a network URL (rtsp, http(s),
// tcp, udp, ...) or bytes in memory, giving the packets of the best video stream with the container's
// timestamps in ns, the stream's codec parameters and its display rotation. In Annex-B mode H.264 and HEVC
// packets pass h264_mp4toannexb / hevc_mp4toannexb, so a hardware decoder (NVDEC) can take them as they are.
//
// Every byte is hostile: opening throws InputError naming the URI and FFmpeg's reason; read() never throws.
// Network inputs are bounded by deadlines (open, and each read) through libavformat's interrupt callback,
// so a silent server cannot block a read for longer than read_timeout_s.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "media/libav_log.hpp"
#include "runtime/frame_reader.hpp"

extern "C" {
struct AVFormatContext;
struct AVCodecParameters;
struct AVStream;
struct AVPacket;
struct AVBSFContext;
struct AVIOContext;
}

namespace sluice {

struct DemuxOptions {
  // Deadlines for network inputs (URLs; files and memory have none: they cannot stall).
  double open_timeout_s = 10, read_timeout_s = 5;
  // H.264/HEVC packets as Annex-B byte streams (start codes, parameter sets in band); other codecs unchanged.
  bool annex_b = false;
  // Demuxer and protocol options (AVDictionary), e.g. {"rtsp_transport", "udp"}; rtsp defaults to tcp.
  std::map<std::string, std::string> format_options;
  // An http(s):// URL read as a whole file (a job's input), not as a stream: only the http, https, tls and tcp
  // protocols may be opened (a playlist it serves included; FFmpeg itself refuses a redirect to anything but
  // http(s)://, file:// included), each socket read or write gives up after read_timeout_s (rw_timeout) as well
  // as each demux step, and at most `remote_max_bytes` are read (0: no limit). Reasons say "cannot fetch it".
  bool remote_file = false;
  std::int64_t remote_max_bytes = 0;
};

// What a source's reader options ask of the demuxer (deadlines, RTSP transport, the size limit of a remote
// file); both video readers use it. `uri`: the input; an http(s):// URL of a file input is a remote file.
DemuxOptions demux_options(const ReaderOptions& reader, const std::string& uri = {}, bool whole_file = false);

// A demuxed packet; the demuxer reuses it on each read().
class DemuxPacket {
 public:
  DemuxPacket();
  ~DemuxPacket();
  DemuxPacket(const DemuxPacket&) = delete;
  DemuxPacket& operator=(const DemuxPacket&) = delete;

  std::span<const std::uint8_t> data() const noexcept;
  std::optional<std::int64_t> pts_ns, dts_ns;  // on the container's timeline; none where it has none
  bool keyframe = false;
  bool corrupt = false;  // the container flagged it (a short read at a truncated end, a CRC failure)
  // RTP packets found missing (a sequence gap) while this packet was read: it, or a packet before it, lacks
  // data. rtsp:// only (both transports: the demuxer checks sequence numbers over TCP too).
  std::int64_t rtp_packets_lost = 0;
  AVPacket* av() const noexcept { return packet_; }  // for avcodec_send_packet(); timestamps in time_base()

 private:
  AVPacket* packet_;
};

enum class DemuxStatus : std::uint8_t { packet, end, error };

class Demuxer {
 public:
  // A URL (scheme://...), or else a local file path (read through the file protocol only). Throws InputError
  // "'URI': reason" (the URI as shown_uri() shows it: a URL's query and user info hidden).
  Demuxer(const std::string& uri, const DemuxOptions& options);
  // Bytes in memory (tests, the fuzzer); `name` stands for the URI in messages. The bytes must outlive it.
  Demuxer(std::span<const std::uint8_t> bytes, const std::string& name, const DemuxOptions& options);
  ~Demuxer();
  Demuxer(const Demuxer&) = delete;
  Demuxer& operator=(const Demuxer&) = delete;

  // The next packet of the video stream. end: no more; error: `why` says what (a read failed, timed out, or a
  // file's container shows its end is missing: ended_early()).
  DemuxStatus read(DemuxPacket& packet, std::string& why) noexcept;

  const std::string& uri() const noexcept { return uri_; }
  // A remote file (DemuxOptions::remote_file) whose read failed for want of its bytes (a deadline, url_max_mb, a
  // connection lost), not for what they hold: it is incomplete, and fails, whatever frames came before.
  bool cut_off() const noexcept { return cut_off_; }
  // Cut off for a reason that may pass if it is fetched again later (a deadline, a lost connection, an HTTP 5xx
  // reply to a range request), not url_max_mb. Opening such a file throws InputError with `transient` set.
  bool cut_off_transiently() const noexcept { return cut_off_transiently_; }
  // What FFmpeg logs for this input (media/libav_log.hpp): a decoder of its packets logs here too.
  LibavLog& log() noexcept { return *log_; }
  // The video stream's parameters (after the Annex-B filter in Annex-B mode: extradata is then Annex-B too).
  const AVCodecParameters& codec_parameters() const noexcept;
  int time_base_num() const noexcept { return tb_num_; }
  int time_base_den() const noexcept { return tb_den_; }
  // Clockwise degrees (0, 90, 180, 270) to turn a frame so it shows upright: the stream's display matrix, as
  // ffmpeg's autorotate reads it.
  int rotation() const noexcept { return rotation_; }
  // How many frames the video holds, where the container states it: MP4/MOV's sample table, less the samples an
  // edit list cuts; -1 for every other container (an estimate from duration x rate, or AVI's header with its
  // dropped-frame chunks, overshoots a variable-frame-rate file: fewer frames than it says is no truncation).
  std::int64_t frames_announced() const noexcept { return frames_announced_; }
  double fps() const noexcept { return fps_; }  // average rate; 0 when unknown
  // A file's end (not a live stream's) that its container shows to be early makes read() return error, not end,
  // with `why` naming what was seen (see end_shows_cut()); this is true after such an error.
  bool ended_early() const noexcept { return ended_early_; }
  std::string container() const;  // the demuxer's name, e.g. "mov,mp4,m4a,3gp,3g2,mj2"
  // A stream time in ns (none for AV_NOPTS_VALUE).
  std::optional<std::int64_t> to_ns(std::int64_t ts) const noexcept;

 private:
  struct Memory;
  void open(const std::string& url, const DemuxOptions& options, bool network);
  void close() noexcept;
  void find_video_stream();
  void count_frames(AVStream* st);
  void start_annex_b();
  [[noreturn]] void fail(const std::string& what, int err, bool transient = false) const;
  bool transient_fetch_error(int err) const noexcept;
  std::string with_libav_detail(const std::string& why) const;
  void arm(double seconds) noexcept;
  static int interrupted(void* self) noexcept;
  DemuxStatus read_video_packet(AVPacket* p, std::string& why) noexcept;
  void note_packet(const AVPacket* p) noexcept;
  std::string end_shows_cut();
  std::string riff_shortfall();
  std::string ts_shortfall();
  std::string container_label() const;
  void fill(DemuxPacket& packet) noexcept;

  std::string uri_;
  std::unique_ptr<LibavLog> log_;
  double read_timeout_s_ = 0;
  bool network_ = false;
  std::int64_t deadline_ns_ = 0;  // 0: none
  std::int64_t max_bytes_ = 0;    // a remote file's limit (0: none)
  bool remote_ = false, cut_off_ = false, cut_off_transiently_ = false;
  bool too_large() const noexcept;
  std::unique_ptr<Memory> memory_;
  AVFormatContext* format_ = nullptr;
  AVBSFContext* bsf_ = nullptr;
  AVPacket* raw_ = nullptr;  // what av_read_frame gave, before the filter
  int stream_ = -1;
  int tb_num_ = 0, tb_den_ = 1;
  int rotation_ = 0;
  std::int64_t frames_announced_ = -1;
  double fps_ = 0;
  bool demux_ended_ = false, ended_ = false, ended_early_ = false;
  // The last video packet the container gave (before any filter): whether it flagged it corrupt, where it was.
  bool last_corrupt_ = false;
  std::int64_t last_pos_ = -1;
  int last_size_ = 0;
  // MPEG-TS: for each packet size (188, 192, 204), the byte offset modulo it of the first video packet, and
  // whether every video packet since started at that offset (libavformat's packet size is its own).
  static constexpr int kTsSizes[3] = {188, 192, 204};
  std::int64_t ts_phase_[3] = {-1, -1, -1};
  bool ts_aligned_[3] = {true, true, true};
  std::int64_t rtp_missed_seen_ = 0;  // log_->rtp_packets_missed() when the last packet was filled
};

// FFmpeg's text for an error code ("Invalid data found when processing input").
std::string av_error_text(int err);


}  // namespace sluice
