#include "media/frame_scaler.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

extern "C" {
#include <libavutil/frame.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include "media/frame_fit.hpp"

namespace sluice {
namespace {

AVPixelFormat av_format_of(PixelFormat p) {
  switch (p) {
    case PixelFormat::bgr8: return AV_PIX_FMT_BGR24;
    case PixelFormat::rgb8: return AV_PIX_FMT_RGB24;
    case PixelFormat::gray8: return AV_PIX_FMT_GRAY8;
    case PixelFormat::nv12: return AV_PIX_FMT_NV12;
    case PixelFormat::i420: return AV_PIX_FMT_YUV420P;
  }
  return AV_PIX_FMT_NONE;
}

bool subsampled(PixelFormat p) { return p == PixelFormat::nv12 || p == PixelFormat::i420; }

// The deprecated full-range "J" formats as their plain twins (libswscale warns about the former); the range
// is passed on its own.
AVPixelFormat plain_format(AVPixelFormat f, bool& full_range) {
  switch (f) {
    case AV_PIX_FMT_YUVJ420P: full_range = true; return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P: full_range = true; return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P: full_range = true; return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P: full_range = true; return AV_PIX_FMT_YUV440P;
    case AV_PIX_FMT_YUVJ411P: full_range = true; return AV_PIX_FMT_YUV411P;
    default: return f;
  }
}

// The stream's YUV matrix in libswscale's terms; unspecified is BT.601, as libswscale and ffmpeg assume.
int sws_colorspace(AVColorSpace cs) {
  switch (cs) {
    case AVCOL_SPC_BT709: return SWS_CS_ITU709;
    case AVCOL_SPC_FCC: return SWS_CS_FCC;
    case AVCOL_SPC_SMPTE240M: return SWS_CS_SMPTE240M;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return SWS_CS_BT2020;
    default: return SWS_CS_ITU601;
  }
}

void check_target(const FrameTarget& t) {
  if (t.data == nullptr) throw std::invalid_argument("frame target without memory");
  if (t.width <= 0 || t.height <= 0)
    throw std::invalid_argument("frame target size must be positive (got " + std::to_string(t.width) + "x" +
                                std::to_string(t.height) + ")");
  if (subsampled(t.pixel) && (t.width % 2 != 0 || t.height % 2 != 0))
    throw std::invalid_argument(std::string(to_string(t.pixel)) + " needs even width and height (got " +
                                std::to_string(t.width) + "x" + std::to_string(t.height) + ")");
}

// The target's planes as FrameTarget lays them out (tightly packed, one after the other).
struct TargetPlanes {
  int count = 1;
  std::uint8_t* data[3] = {};
  std::ptrdiff_t stride[3] = {};
  int element_bytes[3] = {1, 1, 1};
  int shift[3] = {0, 0, 0};  // log2 of the plane's subsampling, both axes
  std::uint8_t black[3] = {0, 0, 0};
};

TargetPlanes planes_of(const FrameTarget& t) {
  TargetPlanes p;
  auto* base = reinterpret_cast<std::uint8_t*>(t.data);
  const std::ptrdiff_t w = t.width, h = t.height;
  p.data[0] = base;
  switch (t.pixel) {
    case PixelFormat::bgr8:
    case PixelFormat::rgb8: p.stride[0] = 3 * w; p.element_bytes[0] = 3; break;
    case PixelFormat::gray8: p.stride[0] = w; break;
    case PixelFormat::nv12:
      p.count = 2;
      p.stride[0] = p.stride[1] = w;
      p.data[1] = base + w * h;
      p.element_bytes[1] = 2;
      p.shift[1] = 1;
      p.black[0] = 16;
      p.black[1] = 128;
      break;
    case PixelFormat::i420:
      p.count = 3;
      p.stride[0] = w;
      p.stride[1] = p.stride[2] = w / 2;
      p.data[1] = base + w * h;
      p.data[2] = base + w * h + (w / 2) * (h / 2);
      p.shift[1] = p.shift[2] = 1;
      p.black[0] = 16;
      p.black[1] = p.black[2] = 128;
      break;
  }
  return p;
}

}  // namespace

void FrameScaler::Scratch::shape(int w, int h, int pix_fmt) {
  if (w == width && h == height && pix_fmt == format) return;
  constexpr int kAlign = 64;
  const int bytes = av_image_get_buffer_size(static_cast<AVPixelFormat>(pix_fmt), w, h, kAlign);
  if (bytes < 0) throw std::invalid_argument("cannot lay out a " + std::to_string(w) + "x" + std::to_string(h) + " picture");
  const std::size_t need = static_cast<std::size_t>(bytes) + kAlign;  // SIMD rows may run a little past the end
  if (need > capacity) {
    av_freep(&buffer);
    capacity = 0;
    buffer = static_cast<std::uint8_t*>(av_malloc(need));
    if (buffer == nullptr) throw std::bad_alloc();
    capacity = need;
  }
  if (av_image_fill_arrays(data, linesize, buffer, static_cast<AVPixelFormat>(pix_fmt), w, h, kAlign) < 0)
    throw std::invalid_argument("cannot lay out a " + std::to_string(w) + "x" + std::to_string(h) + " picture");
  width = w;
  height = h;
  format = pix_fmt;
}

FrameScaler::Scratch::~Scratch() { av_freep(&buffer); }

FrameScaler::~FrameScaler() {
  av_frame_free(&cropped_);
  sws_freeContext(scale_);
}

void FrameScaler::convert(const AVFrame& frame, int rotation, Fit fit, const FrameTarget& t) {
  check_target(t);
  const auto format = static_cast<AVPixelFormat>(frame.format);
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
  if (frame.width <= 0 || frame.height <= 0 || frame.data[0] == nullptr || desc == nullptr)
    throw std::invalid_argument("empty frame");
  if ((desc->flags & AV_PIX_FMT_FLAG_HWACCEL) || !sws_isSupportedInput(format))
    throw std::invalid_argument(std::string("frames in pixel format ") + desc->name + " cannot be converted");

  // Which part of the upright frame goes where in the target, then that part in the stored frame.
  const int turns = (rotation / 90) & 3;
  const bool sideways = (turns & 1) != 0;
  const int upright_w = sideways ? frame.height : frame.width, upright_h = sideways ? frame.width : frame.height;
  const int source_align = 1 << std::max(desc->log2_chroma_w, desc->log2_chroma_h);
  const FitPlan plan =
      plan_fit(upright_w, upright_h, t.width, t.height, fit, subsampled(t.pixel) ? 2 : 1, source_align);
  const PixelRect stored = unrotate_rect(plan.source, frame.width, frame.height, turns);

  const AVFrame* src = &frame;
  if (stored != PixelRect{0, 0, frame.width, frame.height}) {
    if (cropped_ == nullptr && (cropped_ = av_frame_alloc()) == nullptr) throw std::bad_alloc();
    av_frame_unref(cropped_);
    if (av_frame_ref(cropped_, &frame) < 0) throw std::runtime_error("cannot reference the decoded frame");
    cropped_->crop_left = static_cast<std::size_t>(stored.x);
    cropped_->crop_top = static_cast<std::size_t>(stored.y);
    cropped_->crop_right = static_cast<std::size_t>(frame.width - stored.x - stored.width);
    cropped_->crop_bottom = static_cast<std::size_t>(frame.height - stored.y - stored.height);
    if (av_frame_apply_cropping(cropped_, AV_FRAME_CROP_UNALIGNED) < 0)
      throw std::runtime_error("cannot crop the decoded frame");
    src = cropped_;
  }

  // Scaled in the frame's own orientation into scaled_, then turned (or copied) into the target.
  const int scaled_w = sideways ? plan.dest.height : plan.dest.width;
  const int scaled_h = sideways ? plan.dest.width : plan.dest.height;
  const AVPixelFormat out = av_format_of(t.pixel);
  bool full_range = src->color_range == AVCOL_RANGE_JPEG;
  const AVPixelFormat in = plain_format(static_cast<AVPixelFormat>(src->format), full_range);
  scale_ = sws_getCachedContext(scale_, src->width, src->height, in, scaled_w, scaled_h, out, SWS_BICUBIC, nullptr,
                                nullptr, nullptr);
  if (scale_ == nullptr)
    throw std::invalid_argument(std::string("libswscale cannot convert ") + desc->name + " " +
                                std::to_string(src->width) + "x" + std::to_string(src->height) + " to " +
                                std::string(to_string(t.pixel)) + " " + std::to_string(scaled_w) + "x" +
                                std::to_string(scaled_h));
  // The source's matrix and range in, BT.601 out (full range for RGB and gray, limited for YUV). Between two
  // YUV formats libswscale converts the matrix through RGB when they differ; it returns -1 where there is
  // nothing to convert, which is no error.
  const bool out_full = !subsampled(t.pixel);
  (void)sws_setColorspaceDetails(scale_, sws_getCoefficients(sws_colorspace(src->colorspace)), full_range ? 1 : 0,
                                 sws_getCoefficients(SWS_CS_ITU601), out_full ? 1 : 0, 0, 1 << 16, 1 << 16);
  scaled_.shape(scaled_w, scaled_h, out);
  const int rows = sws_scale(scale_, src->data, src->linesize, 0, src->height, scaled_.data, scaled_.linesize);
  av_frame_unref(cropped_);  // the decoder's picture goes back to it now (no-op when nothing was cropped)
  if (rows <= 0) throw std::runtime_error("libswscale could not convert the frame");

  const TargetPlanes dst = planes_of(t);
  const bool bars = plan.dest != PixelRect{0, 0, t.width, t.height};
  for (int i = 0; i < dst.count; ++i) {
    const int shift = dst.shift[i];
    if (bars)
      std::memset(dst.data[i], dst.black[i], static_cast<std::size_t>(dst.stride[i]) * static_cast<std::size_t>(t.height >> shift));
    std::uint8_t* at = dst.data[i] + (plan.dest.y >> shift) * dst.stride[i] +
                       static_cast<std::ptrdiff_t>(plan.dest.x >> shift) * dst.element_bytes[i];
    rotate_plane(scaled_.data[i], scaled_.linesize[i], scaled_w >> shift, scaled_h >> shift, dst.element_bytes[i], at,
                 dst.stride[i], turns);
  }
}

}  // namespace sluice
