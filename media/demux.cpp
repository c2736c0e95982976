#include "media/demux.hpp"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavcodec/bsf.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/error.h>
#include <libavutil/intreadwrite.h>
#include <libavutil/log.h>
}

#include "media/file_checks.hpp"
#include "runtime/frame_reader.hpp"
#include "runtime/utf8.hpp"

namespace sluice {

DemuxOptions demux_options(const ReaderOptions& reader, const std::string& uri, bool whole_file) {
  DemuxOptions d;
  d.open_timeout_s = reader.open_timeout_s;
  d.read_timeout_s = reader.read_timeout_s;
  if (reader.rtsp_over_udp) d.format_options["rtsp_transport"] = "udp";
  if (whole_file && is_http_url(uri)) {
    d.remote_file = true;
    d.remote_max_bytes = reader.url_max_bytes;
  }
  return d;
}
namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool is_url(const std::string& uri) { return uri.find("://") != std::string::npos; }

// The clockwise turn ffmpeg's autorotate applies for a display matrix (fftools' get_rotation): 0, 90, 180 or
// 270; other angles are not turned (as ffmpeg does not).
int rotation_of(const std::uint8_t* matrix, std::size_t size) {
  if (matrix == nullptr || size < 9 * sizeof(std::int32_t)) return 0;
  std::int32_t m[9];
  std::memcpy(m, matrix, sizeof m);
  double theta = -av_display_rotation_get(m);
  if (!std::isfinite(theta)) return 0;
  theta -= 360 * std::floor(theta / 360 + 0.9 / 360);
  for (int quarter : {0, 90, 180, 270, 360})
    if (std::fabs(theta - quarter) < 1.0) return quarter % 360;
  return 0;
}

bool valid(AVRational r) { return r.num > 0 && r.den > 0; }

// Probing a network stream: bytes of whole packets kept (FFmpeg: 5 MB; a 4K HEVC keyframe can be a few MB), and
// stream time analysed (FFmpeg: 5 s; live, that is wall time spent before the first frame).
constexpr std::int64_t kNetworkProbeBytes = std::int64_t{8} << 20;
constexpr double kNetworkAnalyzeS = 1.0;

}  // namespace

std::string av_error_text(int err) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  if (av_strerror(err, text, sizeof text) < 0) return "FFmpeg error " + std::to_string(err);
  return text;
}

// ---- DemuxPacket ----

DemuxPacket::DemuxPacket() : packet_(av_packet_alloc()) {
  if (packet_ == nullptr) throw std::bad_alloc();
}
DemuxPacket::~DemuxPacket() { av_packet_free(&packet_); }

std::span<const std::uint8_t> DemuxPacket::data() const noexcept {
  if (packet_->data == nullptr || packet_->size <= 0) return {};
  return {packet_->data, static_cast<std::size_t>(packet_->size)};
}

// ---- Demuxer ----

// Bytes in memory behind a custom AVIOContext.
struct Demuxer::Memory {
  std::span<const std::uint8_t> bytes;
  std::size_t pos = 0;
  AVIOContext* io = nullptr;

  static int read(void* opaque, std::uint8_t* buf, int size) {
    auto* m = static_cast<Memory*>(opaque);
    const std::size_t left = m->bytes.size() - m->pos;
    if (left == 0) return AVERROR_EOF;
    const std::size_t n = std::min(left, static_cast<std::size_t>(std::max(size, 0)));
    std::memcpy(buf, m->bytes.data() + m->pos, n);
    m->pos += n;
    return static_cast<int>(n);
  }
  static std::int64_t seek(void* opaque, std::int64_t offset, int whence) {
    auto* m = static_cast<Memory*>(opaque);
    const auto size = static_cast<std::int64_t>(m->bytes.size());
    if (whence & AVSEEK_SIZE) return size;
    std::int64_t base = 0;
    switch (whence & ~AVSEEK_FORCE) {
      case SEEK_SET: base = 0; break;
      case SEEK_CUR: base = static_cast<std::int64_t>(m->pos); break;
      case SEEK_END: base = size; break;
      default: return AVERROR(EINVAL);
    }
    if (offset > size || offset < -size) return AVERROR(EINVAL);
    const std::int64_t to = base + offset;
    if (to < 0 || to > size) return AVERROR(EINVAL);
    m->pos = static_cast<std::size_t>(to);
    return to;
  }
  ~Memory() {
    if (io != nullptr) {
      av_freep(&io->buffer);
      avio_context_free(&io);
    }
  }
};

Demuxer::Demuxer(const std::string& uri, const DemuxOptions& options)
    : uri_(uri), log_(std::make_unique<LibavLog>(shown_uri(uri))) {
  route_libav_logging();
  const LibavLogScope scope(*log_);
  log_->hold_errors(true);  // a failure to open names FFmpeg's last error line
  try {
    if (is_url(uri)) {
      open(uri, options, true);
      log_->hold_errors(false);
      return;
    }
    // A path is a file: "file:" keeps a name that looks like a protocol ("http:x", "concat:a|b") one, and a
    // playlist inside it (HLS, concat) cannot make the daemon fetch URLs.
    DemuxOptions local = options;
    local.format_options.emplace("protocol_whitelist", "file");
    open("file:" + uri, local, false);
    log_->hold_errors(false);
  } catch (...) {
    close();  // no destructor runs for an object that was never made
    throw;
  }
}

Demuxer::Demuxer(std::span<const std::uint8_t> bytes, const std::string& name, const DemuxOptions& options)
    : uri_(name), log_(std::make_unique<LibavLog>(shown_uri(name))) {
  route_libav_logging();
  const LibavLogScope scope(*log_);
  memory_ = std::make_unique<Memory>();
  memory_->bytes = bytes;
  constexpr int kBufferBytes = 16 * 1024;
  auto* buffer = static_cast<std::uint8_t*>(av_malloc(kBufferBytes));
  if (buffer == nullptr) throw std::bad_alloc();
  memory_->io = avio_alloc_context(buffer, kBufferBytes, 0, memory_.get(), &Memory::read, nullptr, &Memory::seek);
  if (memory_->io == nullptr) {
    av_free(buffer);
    throw std::bad_alloc();
  }
  try {
    open({}, options, false);
  } catch (...) {
    close();
    throw;
  }
}

Demuxer::~Demuxer() { close(); }

void Demuxer::close() noexcept {
  av_bsf_free(&bsf_);
  av_packet_free(&raw_);
  avformat_close_input(&format_);  // leaves a custom AVIOContext alone: memory_ frees it
  memory_.reset();
}

void Demuxer::fail(const std::string& what, int err, bool transient) const {
  std::string why = what;
  if (err == AVERROR_EXIT && too_large())
    why += fmt::format(" (it is larger than {} bytes: url_max_mb)", max_bytes_);
  else if (err == AVERROR_EXIT && deadline_ns_ != 0)
    why += " (no answer in time)";
  else if (err != 0)
    why += ": " + av_error_text(err);
  why = with_libav_detail(why);
  // FFmpeg's text for most HTTP errors names only the status's class ("Server returned 5XX Server Error reply").
  if ((err == AVERROR_HTTP_OTHER_4XX || err == AVERROR_HTTP_SERVER_ERROR) && log_->http_status() != 0)
    why += fmt::format(" (HTTP {})", log_->http_status());
  throw InputError("'" + shown_uri(uri_) + "': " + why, transient);
}

// Whether a remote file's failure with FFmpeg's code `err` may pass if it is fetched again later: the network or
// the server failed for now (a refused, reset or timed-out connection, an HTTP 5xx reply, 408 Request Timeout,
// 429 Too Many Requests), not the file (404 and the other 4xx, a refused redirect, bytes that are no video,
// url_max_mb). A deadline (AVERROR_EXIT) is judged where it is known (the caller).
bool Demuxer::transient_fetch_error(int err) const noexcept {
  if (!remote_) return false;
  for (const int e : {ECONNREFUSED, ECONNRESET, ECONNABORTED, ETIMEDOUT, EPIPE, EHOSTUNREACH, ENETUNREACH, ENETDOWN, EAGAIN})
    if (err == AVERROR(e)) return true;
  const int status = log_->http_status();
  if (err == AVERROR_HTTP_SERVER_ERROR) return true;
  if (err == AVERROR_HTTP_OTHER_4XX || err == AVERROR(EIO)) return status == 408 || status == 429 || (status >= 500 && status <= 599);
  return false;
}

std::string Demuxer::with_libav_detail(const std::string& why) const {
  // The return code is often generic ("I/O error") where FFmpeg logged what happened ("Connection to
  // tcp://cam:554 failed: Connection refused"): keep that text too. A line that ends with the code's own text
  // says the same, and more: it takes that text's place.
  const std::string detail = log_->last_error();
  if (detail.empty() || why.find(detail) != std::string::npos) return why;
  const auto colon = why.rfind(": ");
  if (colon != std::string::npos) {
    const std::string code_text = why.substr(colon + 2);
    if (!code_text.empty() && detail.size() > code_text.size() &&
        detail.compare(detail.size() - code_text.size(), code_text.size(), code_text) == 0)
      return why.substr(0, colon + 2) + detail;
  }
  return why + " (FFmpeg: " + detail + ")";
}

void Demuxer::arm(double seconds) noexcept {
  deadline_ns_ = network_ ? steady_ns() + static_cast<std::int64_t>(std::clamp(seconds, 0.001, 86400.0) * 1e9) : 0;
}

bool Demuxer::too_large() const noexcept {
  return max_bytes_ > 0 && format_ != nullptr && format_->pb != nullptr && format_->pb->bytes_read > max_bytes_;
}

int Demuxer::interrupted(void* self) noexcept {
  const auto* d = static_cast<const Demuxer*>(self);
  if (d->too_large()) return 1;  // a remote file past its limit: whatever step it is in ends
  return d->deadline_ns_ != 0 && steady_ns() > d->deadline_ns_ ? 1 : 0;
}

void Demuxer::open(const std::string& url, const DemuxOptions& options, bool network) {
  network_ = network;
  read_timeout_s_ = options.read_timeout_s;
  raw_ = av_packet_alloc();
  format_ = avformat_alloc_context();
  if (raw_ == nullptr || format_ == nullptr) throw std::bad_alloc();
  format_->interrupt_callback.callback = &Demuxer::interrupted;
  format_->interrupt_callback.opaque = this;
  if (memory_) {
    format_->pb = memory_->io;
    format_->flags |= AVFMT_FLAG_CUSTOM_IO;
  }
  AVDictionary* dict = nullptr;
  for (const auto& [key, value] : options.format_options) av_dict_set(&dict, key.c_str(), value.c_str(), 0);
  const auto set_default = [&](const char* key, const std::string& value) {
    if (!options.format_options.count(key)) av_dict_set(&dict, key, value.c_str(), 0);
  };
  if (url.rfind("rtsp://", 0) == 0) {
    // Over TCP an RTSP camera's frames arrive whole (UDP loses packets on a busy host); OpenCV did the same.
    set_default("rtsp_transport", "tcp");
    const auto transport = options.format_options.find("rtsp_transport");
    const bool tcp = transport == options.format_options.end() || transport->second == "tcp";
    // The reordering queue is where libavformat checks RTP sequence numbers (a gap is logged, and counted in
    // DemuxPacket::rtp_packets_lost); a camera drops packets over TCP too when its send buffer is full. Two is
    // the smallest queue that checks: a gap holds back one packet, an unbroken stream none. Over UDP the queue
    // holds a datagram (up to 64 KiB) per slot until max_delay: 128 slots bound it at 8 MiB (FFmpeg: 500).
    set_default("reorder_queue_size", tcp ? "2" : "128");
  }
  const bool remote = network && options.remote_file;
  if (remote) {
    // A file on a web server (a job's input; every byte and every redirect hostile): nothing but HTTP(S) may be
    // opened, not even by a playlist it serves (HLS would open file:// or data: URLs), each socket operation has
    // its own deadline besides the demuxer's, and ICY (internet radio) metadata is not asked for.
    set_default("protocol_whitelist", "http,https,tls,tcp");
    set_default("rw_timeout", std::to_string(static_cast<std::int64_t>(options.read_timeout_s * 1e6)));
    set_default("icy", "0");
    max_bytes_ = options.remote_max_bytes;
    remote_ = true;
  }
  if (network) {
    // Probing (avformat_find_stream_info) keeps what it reads: a normal camera is known from its first pictures.
    set_default("probesize", std::to_string(kNetworkProbeBytes));
    set_default("analyzeduration", std::to_string(static_cast<std::int64_t>(kNetworkAnalyzeS * 1e6)));
  }
  arm(options.open_timeout_s);
  int err = avformat_open_input(&format_, memory_ ? "" : url.c_str(), nullptr, &dict);  // frees format_ on failure
  av_dict_free(&dict);
  // A stream's reason is FFmpeg's error (with its logged detail); a timeout says how long it waited.
  const char* const not_a_video = "not a video FFmpeg can decode (unsupported or corrupt)";
  const char* const cannot = remote ? "cannot fetch it" : "cannot open the stream";
  std::string cannot_open = !network ? not_a_video
                            : err == AVERROR_EXIT && !too_large()
                                ? fmt::format("{}: nothing answered within {:g} s", cannot, options.open_timeout_s)
                                : cannot;
  if (remote && err == AVERROR_INVALIDDATA) cannot_open = not_a_video;  // it was fetched: its bytes are no video
  if (remote && err == AVERROR(EINVAL))  // how FFmpeg's http protocol refuses a redirect to another scheme
    cannot_open += " (FFmpeg refuses so a redirect to anything but http(s)://, such as file://)";
  // A deadline passed: the server may answer another time.
  if (err == AVERROR_EXIT && network && !too_large()) fail(cannot_open, 0, remote);
  if (err < 0) fail(cannot_open, err, transient_fetch_error(err));
  // A picture that never ends (a fragmented NAL unit without its last fragment) grows libavformat's parser
  // buffer at whatever rate the peer sends, and no option bounds that buffer. Reading, the read deadline bounds
  // it; probing gets the same allowance plus the time it analyses, so either phase holds at most that many
  // seconds of the peer's bytes (a camera must send a picture within read_timeout_s anyway).
  const double probe_s = std::min(options.open_timeout_s, kNetworkAnalyzeS + options.read_timeout_s);
  arm(probe_s);
  err = avformat_find_stream_info(format_, nullptr);
  // Interrupted, it may still return success (what it read counts as the end of the stream).
  if (too_large()) fail(std::string(remote ? "cannot fetch it" : "cannot open the stream"), AVERROR_EXIT);
  if (network && (err == AVERROR_EXIT || interrupted(this)))
    fail(fmt::format("{}: its pictures were not known within {:g} s of probing",
                     remote ? "cannot fetch it" : "cannot open the stream", probe_s),
         0, remote);
  if (err < 0) fail(cannot_open, err, transient_fetch_error(err));
  find_video_stream();
  if (options.annex_b) start_annex_b();
  deadline_ns_ = 0;
}

void Demuxer::find_video_stream() {
  const int best = av_find_best_stream(format_, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (best < 0) fail("not a video FFmpeg can decode (no video stream)", 0);
  AVStream* st = format_->streams[best];
  if (st->disposition & AV_DISPOSITION_ATTACHED_PIC)
    fail("not a video FFmpeg can decode (its only picture is attached cover art)", 0);
  const AVCodecParameters* par = st->codecpar;
  if (par->width <= 0 || par->height <= 0)
    fail("not a video FFmpeg can decode (the video stream's picture size is unknown)", 0);
  stream_ = best;
  for (unsigned i = 0; i < format_->nb_streams; ++i)
    if (static_cast<int>(i) != stream_) format_->streams[i]->discard = AVDISCARD_ALL;  // not even read into packets
  tb_num_ = st->time_base.num;
  tb_den_ = st->time_base.den;
  if (!valid(st->time_base)) fail("not a video FFmpeg can decode (the video stream has no valid time base)", 0);

  std::size_t size = 0;
  const std::uint8_t* matrix = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
  rotation_ = rotation_of(matrix, size);

  const AVRational rate = valid(st->avg_frame_rate) ? st->avg_frame_rate : st->r_frame_rate;
  if (valid(rate)) {
    const double fps = av_q2d(rate);
    fps_ = std::isfinite(fps) && fps > 0 && fps <= 1000 ? fps : 0;
  }
  count_frames(st);
}

// Only MP4/MOV's sample table states how many frames the video holds: its index lists every sample, and an edit
// list that cuts the first ones (a stream copy cut between keyframes) marks them discarded (decoded for the
// frames after them, never shown). No other count is exact: AVI's header counts the empty chunks that stand for
// dropped frames; Matroska, WebM, MPEG-TS and FLV state none, and duration x rate says nothing of the frames a
// variable-rate file skips (ffmpeg writes the nominal rate: avg_frame_rate equals r_frame_rate even then). Such
// an estimate would call a complete file truncated, so there is no count at all (progress shows none).
void Demuxer::count_frames(AVStream* st) {
  if (container().rfind("mov,", 0) != 0 || st->nb_frames <= 0) return;
  const int entries = avformat_index_get_entries_count(st);
  if (entries <= 0) {
    frames_announced_ = st->nb_frames;
    return;
  }
  std::int64_t shown = 0;
  for (int i = 0; i < entries; ++i)
    if (const AVIndexEntry* e = avformat_index_get_entry(st, i); e != nullptr && !(e->flags & AVINDEX_DISCARD_FRAME))
      ++shown;
  if (shown > 0) frames_announced_ = shown;
}

void Demuxer::start_annex_b() {
  const AVCodecParameters* par = format_->streams[stream_]->codecpar;
  const char* name = par->codec_id == AV_CODEC_ID_H264 ? "h264_mp4toannexb"
                     : par->codec_id == AV_CODEC_ID_HEVC ? "hevc_mp4toannexb"
                                                          : nullptr;
  if (name == nullptr) return;  // other codecs' packets go to NVDEC as they are
  const AVBitStreamFilter* filter = av_bsf_get_by_name(name);
  if (filter == nullptr) fail(std::string("this FFmpeg lacks the ") + name + " bitstream filter", 0);
  int err = av_bsf_alloc(filter, &bsf_);
  if (err < 0) fail(std::string("cannot start ") + name, err);
  err = avcodec_parameters_copy(bsf_->par_in, par);
  if (err < 0) fail(std::string("cannot start ") + name, err);
  bsf_->time_base_in = format_->streams[stream_]->time_base;
  err = av_bsf_init(bsf_);
  if (err < 0) fail(std::string("cannot convert the stream to Annex-B (") + name + ")", err);
  tb_num_ = bsf_->time_base_out.num;
  tb_den_ = bsf_->time_base_out.den;
}

const AVCodecParameters& Demuxer::codec_parameters() const noexcept {
  return bsf_ != nullptr ? *bsf_->par_out : *format_->streams[stream_]->codecpar;
}

std::string Demuxer::container() const { return format_->iformat != nullptr ? format_->iformat->name : "?"; }

std::optional<std::int64_t> Demuxer::to_ns(std::int64_t ts) const noexcept {
  if (ts == AV_NOPTS_VALUE) return std::nullopt;
  const std::int64_t ns = av_rescale_q(ts, AVRational{tb_num_, tb_den_}, AVRational{1, 1'000'000'000});
  if (ns == INT64_MIN) return std::nullopt;  // overflowed
  return ns;
}

void Demuxer::fill(DemuxPacket& packet) noexcept {
  const AVPacket* p = packet.av();
  const std::int64_t missed = log_->rtp_packets_missed();
  packet.rtp_packets_lost = missed - rtp_missed_seen_;
  rtp_missed_seen_ = missed;
  packet.pts_ns = to_ns(p->pts);
  packet.dts_ns = to_ns(p->dts);
  packet.keyframe = (p->flags & AV_PKT_FLAG_KEY) != 0;
  packet.corrupt = (p->flags & AV_PKT_FLAG_CORRUPT) != 0;
}

// The next packet of the video stream from the container, into `p`.
DemuxStatus Demuxer::read_video_packet(AVPacket* p, std::string& why) noexcept {
  arm(read_timeout_s_);  // one deadline for the whole read: other streams' packets do not extend it
  int err = 0;
  while (true) {
    av_packet_unref(p);
    err = av_read_frame(format_, p);
    if (err < 0 || p->stream_index == stream_) break;
  }
  deadline_ns_ = 0;
  if (too_large()) err = AVERROR_EXIT;  // the end of a file cut short by its limit is no end
  if (err == AVERROR_EOF) {
    if (network_ && !remote_) return DemuxStatus::end;  // a live stream ends where its server stops
    why = end_shows_cut();
    if (why.empty()) return DemuxStatus::end;
    ended_early_ = true;
    return DemuxStatus::error;
  }
  if (err < 0) {
    av_packet_unref(p);
    if (remote_ && err != AVERROR_INVALIDDATA) {
      cut_off_ = true;
      // A deadline or a lost connection may pass; url_max_mb will not. A body that stops early (the server
      // closed it: FFmpeg's EIO) was being served, so the file is there.
      cut_off_transiently_ = (err == AVERROR_EXIT && !too_large()) || err == AVERROR(EIO) || transient_fetch_error(err);
    }
    why = err == AVERROR_EXIT && too_large()
              ? fmt::format("it is larger than {} bytes (url_max_mb): not read further", max_bytes_)
          : err == AVERROR_EXIT && network_ ? fmt::format("no data within {:g} s", read_timeout_s_)
                                            : with_libav_detail("reading failed: " + av_error_text(err));
    return DemuxStatus::error;
  }
  note_packet(p);
  return DemuxStatus::packet;
}

void Demuxer::note_packet(const AVPacket* p) noexcept {
  last_corrupt_ = (p->flags & AV_PKT_FLAG_CORRUPT) != 0;
  last_pos_ = p->pos;
  last_size_ = p->size;
  if (p->pos < 0) return;
  for (int i = 0; i < 3; ++i) {
    const std::int64_t phase = p->pos % kTsSizes[i];
    if (ts_phase_[i] < 0) ts_phase_[i] = phase;
    else if (ts_phase_[i] != phase) ts_aligned_[i] = false;
  }
}

std::string Demuxer::container_label() const {
  const std::string name = container();
  if (name == "matroska,webm") return "Matroska";
  if (name.rfind("mov,", 0) == 0) return "MP4/MOV";
  if (name == "avi") return "AVI";
  if (name == "mpegts") return "MPEG-TS";
  if (name == "flv") return "FLV";
  return name;
}

// Why the container shows that the file goes on past where its bytes end ("" when nothing does). Only what the
// demuxer and the container's own structure say counts, never an estimate (duration x rate):
//  - an error line of the demuxer itself, opening included (Matroska/WebM: "File ended prematurely", whether the
//    cut is inside a block or between clusters, as the segment and cluster sizes tell it; MP4: "partial file");
//  - the last packet flagged corrupt: the demuxer read fewer bytes than the container gave it (AVI, FLV, MP4
//    cut inside a frame);
//  - AVI: a RIFF chunk that states more bytes than the file holds (a cut between frames, or in the index);
//  - MPEG-TS: a last TS packet that is incomplete. A TS file holds no length, and FFmpeg's muxer leaves a video
//    PES packet's length unstated, so a cut exactly at a TS packet boundary shows nothing here (a decoder may
//    still find the last picture short).
// FLV states no length the demuxer keeps: a cut exactly between two tags shows nothing.
std::string Demuxer::end_shows_cut() {
  if (const std::string said = log_->last_demuxer_error(); !said.empty())
    return fmt::format("the {} demuxer reports '{}'", container_label(), said);
  if (last_corrupt_)
    return fmt::format("its last packet ({} bytes at byte {}) is incomplete: the {} demuxer flagged it corrupt",
                       last_size_, last_pos_, container_label());
  const std::string name = container();
  if (name == "avi") return riff_shortfall();
  if (name == "mpegts") return ts_shortfall();
  return {};
}

// AVI: the file is a chain of RIFF chunks ('AVI ', then 'AVIX' ones in an OpenDML file past 1 GiB), each stating
// its size; the last one must end where the file does. A writer that could not seek back leaves the size unset
// (0 or 0xFFFFFFFF): then there is nothing to compare.
std::string Demuxer::riff_shortfall() {
  AVIOContext* pb = format_->pb;
  if (pb == nullptr || !(pb->seekable & AVIO_SEEKABLE_NORMAL)) return {};
  const std::int64_t size = avio_size(pb);
  if (size <= 0) return {};
  std::int64_t at = 0;
  for (int chunk = 0; chunk < 4096 && at + 8 <= size; ++chunk) {
    std::uint8_t head[8];
    if (avio_seek(pb, at, SEEK_SET) != at || avio_read(pb, head, sizeof head) != static_cast<int>(sizeof head)) return {};
    if (std::memcmp(head, "RIFF", 4) != 0) return {};  // something else after the chunks: not a cut
    const std::uint32_t stated = AV_RL32(head + 4);
    if (stated == 0 || stated == 0xFFFFFFFFu) return {};
    const std::int64_t end = at + 8 + stated;
    if (end > size)
      return fmt::format("its RIFF chunk at byte {} states {} bytes, and the file ends {} bytes before its end", at,
                         stated, end - size);
    at = end + (stated & 1);
  }
  return {};
}

// MPEG-TS: packets of one fixed size (188 bytes; 192 in M2TS, 204 with Reed-Solomon bytes) from the first; every
// video packet starts at a TS packet, so the sizes its offsets agree with are the candidates. A complete file
// ends on a packet boundary for one of them.
std::string Demuxer::ts_shortfall() {
  AVIOContext* pb = format_->pb;
  const std::int64_t size = pb != nullptr ? avio_size(pb) : -1;
  if (size <= 0) return {};
  int first = -1;
  for (int i = 0; i < 3; ++i) {
    if (ts_phase_[i] < 0 || !ts_aligned_[i]) continue;
    if ((size - ts_phase_[i]) % kTsSizes[i] == 0) return {};
    if (first < 0) first = i;
  }
  if (first < 0) return {};
  return fmt::format("its last MPEG-TS packet is incomplete ({} of {} bytes)", (size - ts_phase_[first]) % kTsSizes[first],
                     kTsSizes[first]);
}

DemuxStatus Demuxer::read(DemuxPacket& packet, std::string& why) noexcept {
  if (ended_) return DemuxStatus::end;
  const LibavLogScope scope(*log_);
  if (bsf_ == nullptr) {
    const DemuxStatus s = read_video_packet(packet.av(), why);
    if (s == DemuxStatus::packet) fill(packet);
    else ended_ = true;
    return s;
  }
  while (true) {
    av_packet_unref(packet.av());  // the filter fills a blank packet
    int err = av_bsf_receive_packet(bsf_, packet.av());
    if (err == 0) {
      fill(packet);
      return DemuxStatus::packet;
    }
    if (err != AVERROR(EAGAIN) || demux_ended_) {  // EOF: drained; after the drain request nothing else comes
      ended_ = true;
      if (err == AVERROR_EOF || err == AVERROR(EAGAIN)) return DemuxStatus::end;
      why = "the Annex-B filter failed: " + av_error_text(err);
      return DemuxStatus::error;
    }
    const DemuxStatus s = read_video_packet(raw_, why);
    if (s == DemuxStatus::error) {
      ended_ = true;
      return s;
    }
    if (s == DemuxStatus::end) {
      demux_ended_ = true;
      err = av_bsf_send_packet(bsf_, nullptr);  // drain what the filter holds
    } else {
      err = av_bsf_send_packet(bsf_, raw_);  // takes the packet's reference
    }
    if (err < 0) {
      av_packet_unref(raw_);
      why = "the Annex-B filter refused a packet: " + av_error_text(err);
      ended_ = true;
      return DemuxStatus::error;
    }
  }
}

}  // namespace sluice
