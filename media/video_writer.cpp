#include "media/video_writer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>

#include <spdlog/spdlog.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include "media/demux.hpp"

namespace sluice {

struct VideoWriter::State {
  std::string path;
  int width = 0, height = 0;  // of the frames given
  int coded_width = 0, coded_height = 0;  // even
  bool finished = false, opened_file = false, have_first = false, avi = false;
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  AVStream* stream = nullptr;
  SwsContext* sws = nullptr;
  AVFrame* pending = nullptr;  // the last frame given, sent once the next one tells its duration
  AVFrame* spare = nullptr;
  AVPacket* packet = nullptr;
  bool have_pending = false;
  std::int64_t origin_ns = 0, last_pts = -1, last_duration = 0, period = 1;  // pts in the codec's time base
  std::map<std::int64_t, std::int64_t> durations;  // pts -> duration of frames sent, until their packet comes
  std::vector<std::uint8_t> padded;
  std::string codec_name;
  std::uint64_t frames = 0;
  // Audio copied from VideoWriterOptions::audio_from.
  AVFormatContext* audio_in = nullptr;
  AVStream* audio_out = nullptr;
  AVPacket* audio_packet = nullptr;
  int audio_index = -1;
  bool audio_done = true;

  ~State() {
    av_packet_free(&audio_packet);
    avformat_close_input(&audio_in);
    sws_freeContext(sws);
    av_frame_free(&pending);
    av_frame_free(&spare);
    av_packet_free(&packet);
    avcodec_free_context(&codec);
    if (format) {
      if (opened_file) avio_closep(&format->pb);
      avformat_free_context(format);
    }
  }

  [[noreturn]] void fail(const std::string& what, int err) const {
    throw std::runtime_error("video writer for '" + path + "': " + what + ": " + av_error_text(err));
  }

  void check(int err, const char* what) const {
    if (err < 0) fail(what, err);
  }

  // Tries to open `encoder` at the writer's size; true when it opened.
  bool try_open(const AVCodec* encoder, const VideoWriterOptions& o) {
    avcodec_free_context(&codec);
    codec = avcodec_alloc_context3(encoder);
    if (!codec) throw std::bad_alloc();
    codec->width = coded_width;
    codec->height = coded_height;
    codec->pix_fmt = AV_PIX_FMT_YUV420P;
    const AVRational rate = av_d2q(o.fallback_fps, 1000000);
    codec->framerate = rate;
    if (avi) codec->time_base = av_inv_q(rate);  // avi has one rate: stamps become frame slots
    else codec->time_base = encoder->id == AV_CODEC_ID_H264 ? AVRational{1, 90000} : AVRational{1, 60000};
    if (format->oformat->flags & AVFMT_GLOBALHEADER) codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    AVDictionary* opts = nullptr;
    if (std::strcmp(encoder->name, "libx264") == 0) {
      av_dict_set(&opts, "preset", "veryfast", 0);
      av_dict_set_int(&opts, "crf", o.quality, 0);
    } else if (encoder->id == AV_CODEC_ID_MPEG4) {
      codec->flags |= AV_CODEC_FLAG_QSCALE;
      codec->global_quality = FF_QP2LAMBDA * std::clamp(o.quality / 8, 2, 31);
    }
    const int err = avcodec_open2(codec, encoder, &opts);
    av_dict_free(&opts);
    if (err < 0) {
      avcodec_free_context(&codec);
      return false;
    }
    codec_name = encoder->name;
    return true;
  }

  void open_encoder(const VideoWriterOptions& o) {
    const bool h264 = o.codec != VideoEncoding::mpeg4;
    if (h264) {
      std::vector<const AVCodec*> candidates;
      if (const AVCodec* x264 = avcodec_find_encoder_by_name("libx264")) candidates.push_back(x264);
      void* it = nullptr;
      while (const AVCodec* c = av_codec_iterate(&it))
        if (av_codec_is_encoder(c) && c->id == AV_CODEC_ID_H264 && std::strcmp(c->name, "libx264") != 0)
          candidates.push_back(c);
      for (const AVCodec* c : candidates)
        if (try_open(c, o)) return;
      if (o.codec == VideoEncoding::h264)
        throw std::runtime_error("video writer for '" + path + "': no H.264 encoder of this FFmpeg opens (" +
                                 std::to_string(candidates.size()) + " tried)");
      spdlog::warn("video writer: no H.264 encoder opens in this FFmpeg ({} tried); writing MPEG-4 part 2 instead",
                   candidates.size());
    }
    const AVCodec* mpeg4 = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
    if (!mpeg4 || !try_open(mpeg4, o))
      throw std::runtime_error("video writer for '" + path + "': the MPEG-4 encoder does not open");
  }

  AVFrame* make_frame() const {
    AVFrame* f = av_frame_alloc();
    if (!f) throw std::bad_alloc();
    f->format = AV_PIX_FMT_YUV420P;
    f->width = coded_width;
    f->height = coded_height;
    return f;
  }

  void drain(bool flushing) {
    for (;;) {
      const int err = avcodec_receive_packet(codec, packet);
      if (err == AVERROR(EAGAIN) || (flushing && err == AVERROR_EOF)) return;
      check(err, "encoding");
      if (auto d = durations.find(packet->pts); d != durations.end()) {
        packet->duration = d->second;
        durations.erase(d);
      }
      av_packet_rescale_ts(packet, codec->time_base, stream->time_base);
      packet->stream_index = stream->index;
      check(av_interleaved_write_frame(format, packet), "writing a packet");
    }
  }

  // Adds the output's audio stream (before the header) when `from` has audio the container can hold.
  void open_audio(const std::string& from) {
    if (from.empty()) return;
    const auto skip = [&](const std::string& why) {
      spdlog::info("video writer: '{}' gets no audio: {}", path, why);
      avformat_close_input(&audio_in);
    };
    if (const int err = avformat_open_input(&audio_in, from.c_str(), nullptr, nullptr); err < 0)
      return skip("cannot open '" + from + "' (" + av_error_text(err) + ")");
    if (const int err = avformat_find_stream_info(audio_in, nullptr); err < 0)
      return skip("cannot read '" + from + "' (" + av_error_text(err) + ")");
    audio_index = av_find_best_stream(audio_in, AVMEDIA_TYPE_AUDIO, -1, -1, nullptr, 0);
    if (audio_index < 0) {
      avformat_close_input(&audio_in);  // no audio stream: nothing to say
      return;
    }
    const AVCodecParameters* par = audio_in->streams[audio_index]->codecpar;
    if (avformat_query_codec(format->oformat, par->codec_id, FF_COMPLIANCE_NORMAL) != 1)
      return skip(std::string(avcodec_get_name(par->codec_id)) + " audio does not go into " + format->oformat->name);
    for (unsigned i = 0; i < audio_in->nb_streams; ++i)
      if (static_cast<int>(i) != audio_index) audio_in->streams[i]->discard = AVDISCARD_ALL;
    audio_out = avformat_new_stream(format, nullptr);
    audio_packet = av_packet_alloc();
    if (!audio_out || !audio_packet) throw std::bad_alloc();
    check(avcodec_parameters_copy(audio_out->codecpar, par), "copying the audio parameters");
    audio_out->codecpar->codec_tag = 0;
    audio_out->time_base = audio_in->streams[audio_index]->time_base;
    audio_done = false;
  }

  // Copies the audio packets that start before `until_ns` (the frames' clock), from the first frame's stamp on.
  void copy_audio(std::int64_t until_ns) {
    if (audio_done) return;
    const AVRational in_tb = audio_in->streams[audio_index]->time_base;
    const std::int64_t origin = av_rescale_q(origin_ns, AVRational{1, 1'000'000'000}, in_tb);
    const std::int64_t until = av_rescale_q(until_ns, AVRational{1, 1'000'000'000}, in_tb);
    for (;;) {
      if (audio_packet->size == 0) {  // nothing held back from the last call
        if (av_read_frame(audio_in, audio_packet) < 0) {
          audio_done = true;
          return;
        }
        if (audio_packet->stream_index != audio_index || audio_packet->pts == AV_NOPTS_VALUE) {
          av_packet_unref(audio_packet);
          continue;
        }
      }
      if (audio_packet->pts >= until) return;  // held for a later call
      if (audio_packet->pts >= origin) {
        audio_packet->pts -= origin;
        if (audio_packet->dts != AV_NOPTS_VALUE) audio_packet->dts -= origin;
        av_packet_rescale_ts(audio_packet, in_tb, audio_out->time_base);
        audio_packet->stream_index = audio_out->index;
        audio_packet->pos = -1;
        if (av_interleaved_write_frame(format, audio_packet) < 0) {
          spdlog::warn("video writer: '{}': writing the audio failed; the rest of the video has none", path);
          audio_done = true;
        }
      }
      av_packet_unref(audio_packet);
      if (audio_done) return;
    }
  }

  void send_pending(std::int64_t duration) {
    if (!have_pending) return;
    duration = std::max<std::int64_t>(duration, 1);
    durations[pending->pts] = duration;
    last_duration = duration;
    check(avcodec_send_frame(codec, pending), "encoding");
    have_pending = false;
    std::swap(pending, spare);
    drain(false);
  }
};

VideoWriter::VideoWriter(const std::string& path, int width, int height, const VideoWriterOptions& o)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.path = path;
  if (width <= 0 || height <= 0 || width > 16384 || height > 16384)
    throw std::runtime_error("video writer for '" + path + "': bad size " + std::to_string(width) + "x" +
                             std::to_string(height));
  s.width = width;
  s.height = height;
  s.coded_width = (width + 1) & ~1;
  s.coded_height = (height + 1) & ~1;
  s.avi = o.container == VideoContainer::avi;
  const char* muxer = o.container == VideoContainer::mkv ? "matroska" : s.avi ? "avi" : "mp4";
  s.check(avformat_alloc_output_context2(&s.format, nullptr, muxer, path.c_str()), "choosing the container");
  s.open_encoder(o);
  s.stream = avformat_new_stream(s.format, nullptr);
  if (!s.stream) throw std::bad_alloc();
  s.check(avcodec_parameters_from_context(s.stream->codecpar, s.codec), "copying the codec parameters");
  s.stream->time_base = s.codec->time_base;
  s.open_audio(o.audio_from);
  s.check(avio_open(&s.format->pb, path.c_str(), AVIO_FLAG_WRITE), "opening the file");
  s.opened_file = true;
  s.check(avformat_write_header(s.format, nullptr), "writing the header");
  s.sws = sws_getContext(s.coded_width, s.coded_height, AV_PIX_FMT_BGR24, s.coded_width, s.coded_height,
                         AV_PIX_FMT_YUV420P, SWS_BILINEAR, nullptr, nullptr, nullptr);
  if (!s.sws) throw std::runtime_error("video writer for '" + path + "': no BGR to YUV 4:2:0 conversion");
  s.pending = s.make_frame();
  s.spare = s.make_frame();
  s.check(av_frame_get_buffer(s.pending, 0), "allocating a frame");
  s.check(av_frame_get_buffer(s.spare, 0), "allocating a frame");
  s.packet = av_packet_alloc();
  if (!s.packet) throw std::bad_alloc();
  const double period = av_q2d(av_inv_q(s.codec->time_base)) / std::max(o.fallback_fps, 0.001);
  s.period = std::max<std::int64_t>(1, std::llround(period));
}

VideoWriter::~VideoWriter() = default;

void VideoWriter::write(const std::uint8_t* bgr, std::int64_t pts_ns) {
  State& s = *s_;
  if (s.finished) throw std::logic_error("video writer: write after finish");
  if (!s.have_first) {
    s.origin_ns = pts_ns;
    s.have_first = true;
  }
  // The frame's place in the codec's time base, from the first frame's stamp; never backwards or repeated.
  const double ticks = static_cast<double>(pts_ns - s.origin_ns) * s.codec->time_base.den /
                       (1e9 * s.codec->time_base.num);
  std::int64_t pts = std::isfinite(ticks) && std::abs(ticks) < 9e15 ? std::llround(ticks) : s.last_pts + s.period;
  if (s.avi) pts = s.last_pts < 0 ? std::max<std::int64_t>(pts, 0) : pts;
  if (pts <= s.last_pts) pts = s.last_pts + (s.avi ? 1 : s.period);
  // The frame before this one now knows how long it lasts.
  s.send_pending(pts - s.last_pts);
  s.copy_audio(pts_ns);

  AVFrame* f = s.pending;
  s.check(av_frame_make_writable(f), "preparing a frame");
  const std::uint8_t* src = bgr;
  int stride = s.width * 3;
  if (s.coded_width != s.width || s.coded_height != s.height) {
    // Pad to the even size by repeating the last column and row.
    const std::size_t row = static_cast<std::size_t>(s.coded_width) * 3;
    s.padded.resize(row * static_cast<std::size_t>(s.coded_height));
    for (int y = 0; y < s.coded_height; ++y) {
      const std::uint8_t* in = bgr + static_cast<std::size_t>(std::min(y, s.height - 1)) * s.width * 3;
      std::uint8_t* out = s.padded.data() + row * static_cast<std::size_t>(y);
      std::memcpy(out, in, static_cast<std::size_t>(s.width) * 3);
      if (s.coded_width != s.width) std::memcpy(out + s.width * 3, in + (s.width - 1) * 3, 3);
    }
    src = s.padded.data();
    stride = static_cast<int>(row);
  }
  const std::uint8_t* planes[1] = {src};
  const int strides[1] = {stride};
  sws_scale(s.sws, planes, strides, 0, s.coded_height, f->data, f->linesize);
  f->pts = pts;
  s.have_pending = true;
  s.last_pts = pts;
  ++s.frames;
}

void VideoWriter::finish() {
  State& s = *s_;
  if (s.finished) return;
  s.finished = true;
  const std::int64_t last = s.last_duration > 0 ? s.last_duration : s.avi ? 1 : s.period;
  s.send_pending(last);
  if (s.have_first) {  // the audio up to the end of the last frame
    const AVRational tb = s.codec->time_base;
    s.copy_audio(s.origin_ns + av_rescale_q(s.last_pts + last, tb, AVRational{1, 1'000'000'000}));
  }
  s.check(avcodec_send_frame(s.codec, nullptr), "flushing the encoder");
  s.drain(true);
  s.check(av_write_trailer(s.format), "writing the trailer");
  s.check(avio_closep(&s.format->pb), "closing the file");
  s.opened_file = false;
}

const std::string& VideoWriter::codec_name() const { return s_->codec_name; }
bool VideoWriter::has_audio() const { return s_->audio_out != nullptr; }
std::uint64_t VideoWriter::frames() const { return s_->frames; }

}  // namespace sluice
