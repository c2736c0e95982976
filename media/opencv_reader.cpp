#include "media/opencv_reader.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/videoio.hpp>
#include <spdlog/spdlog.h>

#include "media/file_checks.hpp"
#include "media/image_sequence.hpp"
#include "runtime/bounded_file.hpp"
#include "media/frame_fit.hpp"
#include "media/image_header.hpp"

namespace sluice {
namespace fs = std::filesystem;
namespace {

// The most pixels an image input may declare: 256 MP (16384x16384, 805 MB as BGR), as for nvJPEG; a photo of
// 100 megapixels fits.
constexpr std::int64_t kMaxImagePixels = std::int64_t{16384} * 16384;

[[noreturn]] void fail(const std::string& uri, const std::string& why) { throw InputError("'" + uri + "': " + why); }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 6 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string fourcc_string(double value) {
  const auto v = static_cast<std::uint32_t>(value);
  std::string s;
  for (int i = 0; i < 4; ++i) {
    const char c = static_cast<char>((v >> (8 * i)) & 0xff);
    s += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  }
  return s;
}

double sane_fps(double fps) { return std::isfinite(fps) && fps > 0 && fps <= 1000 ? fps : 0; }

// Reads frames from a cv::VideoCapture into targets. With a bgr8 target of the frame's own size the capture
// copies straight into the target; otherwise frames land in frame_ and are converted from there.
class CaptureReader : public FrameReader {
 public:
  const InputInfo& info() const override { return info_; }

 protected:
  // False when the capture delivered no frame.
  bool decode_into(const FrameTarget& t) {
    if (direct_ && t.pixel == PixelFormat::bgr8 && t.data != nullptr && t.width == info_.width &&
        t.height == info_.height) {
      cv::Mat dst(t.height, t.width, CV_8UC3, t.data);
      if (!cap_.read(dst)) return false;
      if (dst.data != reinterpret_cast<uchar*>(t.data)) {  // not the announced size or type: convert from now on
        direct_ = false;
        converter_.convert(dst, t, fit_);
      }
      return true;
    }
    if (!cap_.read(frame_)) return false;
    converter_.convert(frame_, t, fit_);
    return true;
  }

  void fill_info(const std::string& uri, InputKind kind) {
    info_.uri = uri;
    info_.kind = kind;
    info_.width = static_cast<int>(cap_.get(cv::CAP_PROP_FRAME_WIDTH));
    info_.height = static_cast<int>(cap_.get(cv::CAP_PROP_FRAME_HEIGHT));
    info_.fps = sane_fps(cap_.get(cv::CAP_PROP_FPS));
    try {
      info_.backend = cap_.getBackendName();
    } catch (const cv::Exception&) {
      info_.backend = "?";
    }
  }

  cv::VideoCapture cap_;
  InputInfo info_;
  FrameConverter converter_;
  cv::Mat frame_;
  Fit fit_ = Fit::stretch;
  bool direct_ = true;
};

// Reads one image file into a Mat through a descriptor opened without blocking (runtime/bounded_file.hpp): a
// FIFO, device or socket put where an image was is refused by what it is, never read, and nothing past
// kMaxImageFileBytes is read. Its header must be one of the image extensions' formats and declare at most
// kMaxImagePixels (imgcodecs would allocate whatever a few compressed megabytes declare, and it reads more
// formats than sluice means to). imgcodecs decodes from memory. Throws InputError ("'PATH': why").
cv::Mat read_image_file(const std::string& path, int flags) {
  std::string bytes;
  try {
    bytes = BoundedFile(path, "image", kMaxImageFileBytes).read_all();
  } catch (const FileReadError& e) {
    throw InputError(e.what());
  }
  if (bytes.empty()) fail(path, "empty file (0 bytes), not an image");
  const auto header = read_image_header(bytes);
  if (!header) fail(path, "not an image sluice reads (its first bytes are no PNG, JPEG, BMP, TIFF, WebP or PNM header)");
  if (header->width > kMaxImagePixels || header->height > kMaxImagePixels ||
      header->width * header->height > kMaxImagePixels)  // each side first: the product of two then fits
    fail(path, std::string(header->format) + " image of " + std::to_string(header->width) + "x" +
                   std::to_string(header->height) + " pixels, more than the 256 MP (16384x16384) an image may " +
                   "have; refused before decoding");
  cv::Mat image;
  try {
    image = cv::imdecode(cv::Mat(1, static_cast<int>(bytes.size()), CV_8U, bytes.data()), flags);
  } catch (const cv::Exception& e) {
    fail(path, std::string("not an image OpenCV can decode: ") + e.what());
  }
  if (image.empty()) fail(path, "not an image OpenCV can decode (unsupported or corrupt)");
  return image;
}

// Image sequences: the files are found first with stat only (media/image_sequence.hpp: a FIFO among them refuses
// the sequence at open, naming it), then each is read through read_image_file as it comes. The sequence ends
// after the last file found; an image that cannot be read or decoded ends it with the reason.
class SequenceReader final : public FrameReader {
 public:
  SequenceReader(const std::string& uri, const ReaderOptions& o) : files_(uri), fit_(o.fit) {
    // The first image gives the size (it is kept for the first read).
    try {
      next_ = read_image_file(files_.path(0), cv::IMREAD_UNCHANGED);
    } catch (const InputError& e) {
      fail(uri, std::string("image 1 of ") + std::to_string(files_.count()) + ": " + e.what());
    }
    info_.uri = uri;
    info_.kind = InputKind::image_sequence;
    info_.frames_total = files_.count();
    info_.width = next_.cols;
    info_.height = next_.rows;
    info_.fps = 0;
    info_.backend = "imgcodecs";
  }

  ReadStatus read(const FrameTarget& target, std::string& why) override {
    if (done_ || frames_read_ >= files_.count()) return ReadStatus::end;
    const std::int64_t index = frames_read_;
    try {
      if (next_.empty()) next_ = read_image_file(files_.path(index), cv::IMREAD_UNCHANGED);
      converter_.convert(next_, target, fit_);
    } catch (const std::exception& e) {  // InputError, cv::Exception, or a target the converter refuses
      done_ = true;
      why = "image " + std::to_string(index + 1) + " of " + std::to_string(files_.count()) + ": " + e.what();
      return ReadStatus::error;
    }
    next_.release();
    ++frames_read_;
    return ReadStatus::frame;
  }
  const InputInfo& info() const override { return info_; }

 private:
  ImageSequenceFiles files_;
  Fit fit_;
  InputInfo info_;
  FrameConverter converter_;
  cv::Mat next_;  // read, not yet handed out
  std::int64_t frames_read_ = 0;
  bool done_ = false;
};

class ImageReader final : public FrameReader {
 public:
  ImageReader(const std::string& uri, const ReaderOptions& o) : fit_(o.fit) {
    check_readable_file(uri);  // says what a path that is no image file is, before anything is opened
    image_ = read_image_file(uri, cv::IMREAD_COLOR);
    info_.uri = uri;
    info_.kind = InputKind::image;
    info_.frames_total = 1;
    info_.width = image_.cols;
    info_.height = image_.rows;
    info_.backend = "imgcodecs";
  }

  ReadStatus read(const FrameTarget& target, std::string& why) override {
    if (image_.empty()) return ReadStatus::end;
    try {
      converter_.convert(image_, target, fit_);
    } catch (const std::exception& e) {
      why = e.what();
      image_.release();
      return ReadStatus::error;
    }
    image_.release();
    return ReadStatus::frame;
  }
  const InputInfo& info() const override { return info_; }

 private:
  cv::Mat image_;
  Fit fit_;
  InputInfo info_;
  FrameConverter converter_;
};

class CameraReader final : public CaptureReader {
 public:
  CameraReader(const std::string& uri, const ReaderOptions& o) {
    fit_ = o.fit;
    const int index = camera_index(uri);
    if (index < 0) fail(uri, "no such camera (names no /dev/videoN device)");
    const std::string dev = "/dev/video" + std::to_string(index);
    std::error_code ec;
    if (!fs::exists(dev, ec))
      fail(uri, "no such camera: " + dev + " does not exist (unplugged? `v4l2-ctl --list-devices` lists cameras)");
    if (::access(dev.c_str(), R_OK | W_OK) != 0) {
      const int err = errno;
      fail(uri, "cannot open " + dev + ": " + std::strerror(err) +
                    (err == EACCES ? " (the user needs to be in the 'video' group)" : ""));
    }
    if (!cap_.open(index, cv::CAP_V4L2))
      fail(uri, "cannot capture from " + dev +
                    " (busy in another program, a metadata node rather than the capture node, or a pixel format "
                    "OpenCV cannot convert)");
    configure(uri, o);
    fill_info(uri, InputKind::camera);
    info_.frames_total = -1;
  }

  ReadStatus read(const FrameTarget& target, std::string& why) override {
    try {
      if (decode_into(target)) return ReadStatus::frame;
      why = "camera stopped delivering frames (unplugged?)";
    } catch (const std::exception& e) {
      why = std::string("camera frame could not be converted: ") + e.what();
    }
    return ReadStatus::error;
  }

 private:
  // The mode asked for, in the order V4L2 needs it (the pixel format first: it decides which sizes and rates
  // exist), then what the camera actually accepted.
  void configure(const std::string& uri, const ReaderOptions& o) {
    if (!o.fourcc.empty()) {
      if (o.fourcc.size() != 4) fail(uri, "fourcc must be 4 characters, e.g. MJPG or YUYV (got '" + o.fourcc + "')");
      cap_.set(cv::CAP_PROP_FOURCC, cv::VideoWriter::fourcc(o.fourcc[0], o.fourcc[1], o.fourcc[2], o.fourcc[3]));
    }
    if (o.width > 0 || o.height > 0) {  // V4L2 applies a size once both axes are set
      cap_.set(cv::CAP_PROP_FRAME_WIDTH, o.width > 0 ? o.width : cap_.get(cv::CAP_PROP_FRAME_WIDTH));
      cap_.set(cv::CAP_PROP_FRAME_HEIGHT, o.height > 0 ? o.height : cap_.get(cv::CAP_PROP_FRAME_HEIGHT));
    }
    if (o.fps > 0) cap_.set(cv::CAP_PROP_FPS, o.fps);

    const int w = static_cast<int>(cap_.get(cv::CAP_PROP_FRAME_WIDTH));
    const int h = static_cast<int>(cap_.get(cv::CAP_PROP_FRAME_HEIGHT));
    const double fps = cap_.get(cv::CAP_PROP_FPS);
    const std::string fourcc = fourcc_string(cap_.get(cv::CAP_PROP_FOURCC));
    const bool size_differs = (o.width > 0 && w != o.width) || (o.height > 0 && h != o.height);
    const bool fps_differs = o.fps > 0 && std::abs(fps - o.fps) > 0.5;
    const bool fourcc_differs = !o.fourcc.empty() && fourcc != o.fourcc;
    if (size_differs || fps_differs || fourcc_differs)
      spdlog::warn("camera {}: asked for {}x{} at {} fps{}{}, the camera gave {}x{} at {} fps {}", uri,
                   o.width > 0 ? std::to_string(o.width) : "?", o.height > 0 ? std::to_string(o.height) : "?",
                   o.fps > 0 ? fmt::format("{:g}", o.fps) : "?", o.fourcc.empty() ? "" : " ", o.fourcc, w, h,
                   fmt::format("{:g}", fps), fourcc);
    else
      spdlog::info("camera {}: {}x{} at {:g} fps {}", uri, w, h, fps, fourcc);
  }
};

}  // namespace

int camera_index(const std::string& uri) {
  std::string s = lower(uri.substr(0, 5)) == "v4l2:" ? uri.substr(5) : uri;
  if (all_digits(s)) return std::stoi(s);
  if (s.rfind("/dev/v4l/", 0) == 0) {  // by-id / by-path links to /dev/videoN
    std::error_code ec;
    const fs::path target = fs::canonical(s, ec);
    if (ec) return -1;
    s = target.string();
  }
  constexpr std::string_view kVideo = "/dev/video";
  if (s.rfind(kVideo, 0) == 0 && all_digits(s.substr(kVideo.size()))) return std::stoi(s.substr(kVideo.size()));
  return -1;
}

std::unique_ptr<FrameReader> open_image_reader(const std::string& uri, const ReaderOptions& options) {
  return std::make_unique<ImageReader>(uri, options);
}

std::unique_ptr<FrameReader> open_image_sequence_reader(const std::string& uri, const ReaderOptions& options) {
  return std::make_unique<SequenceReader>(uri, options);
}

std::unique_ptr<FrameReader> open_camera_reader(const std::string& uri, const ReaderOptions& options) {
  return std::make_unique<CameraReader>(uri, options);
}


// ---- FrameConverter ----

// The part of `bgr` the fit shows; for letterbox, already placed on a black canvas of the target's size.
const cv::Mat& FrameConverter::fitted(const cv::Mat& bgr, cv::Size size, Fit fit, int align) {
  const FitPlan plan = plan_fit(bgr.cols, bgr.rows, size.width, size.height, fit, align);
  if (plan.source == PixelRect{0, 0, bgr.cols, bgr.rows} && plan.dest == PixelRect{0, 0, size.width, size.height})
    return bgr;
  shown_ = bgr(cv::Rect(plan.source.x, plan.source.y, plan.source.width, plan.source.height));
  if (plan.dest == PixelRect{0, 0, size.width, size.height}) return shown_;  // crop
  canvas_.create(size, CV_8UC3);
  canvas_.setTo(cv::Scalar::all(0));
  cv::Mat area = canvas_(cv::Rect(plan.dest.x, plan.dest.y, plan.dest.width, plan.dest.height));
  const bool shrink = area.cols <= shown_.cols && area.rows <= shown_.rows;
  cv::resize(shown_, area, area.size(), 0, 0, shrink ? cv::INTER_AREA : cv::INTER_LINEAR);
  return canvas_;
}

const cv::Mat& FrameConverter::to_bgr8(const cv::Mat& frame) {
  if (frame.type() == CV_8UC3) return frame;
  const cv::Mat* src = &frame;
  if (frame.depth() != CV_8U) {
    const double scale = frame.depth() == CV_16U   ? 1.0 / 257.0
                         : frame.depth() == CV_32F || frame.depth() == CV_64F ? 255.0
                                                                               : 1.0;
    frame.convertTo(depth8_, CV_8U, scale);
    src = &depth8_;
  }
  switch (src->channels()) {
    case 1: cv::cvtColor(*src, bgr_, cv::COLOR_GRAY2BGR); return bgr_;
    case 3: return *src;
    case 4: cv::cvtColor(*src, bgr_, cv::COLOR_BGRA2BGR); return bgr_;
    default:
      throw std::invalid_argument("frame with " + std::to_string(src->channels()) +
                                  " channels (expected 1, 3 or 4)");
  }
}

void FrameConverter::convert(const cv::Mat& frame, const FrameTarget& t, Fit fit) {
  if (t.data == nullptr) throw std::invalid_argument("frame target without memory");
  if (t.width <= 0 || t.height <= 0)
    throw std::invalid_argument("frame target size must be positive (got " + std::to_string(t.width) + "x" +
                                std::to_string(t.height) + ")");
  const bool yuv = t.pixel == PixelFormat::nv12 || t.pixel == PixelFormat::i420;
  if (yuv && (t.width % 2 != 0 || t.height % 2 != 0))
    throw std::invalid_argument(std::string(to_string(t.pixel)) + " needs even width and height (got " +
                                std::to_string(t.width) + "x" + std::to_string(t.height) + ")");
  if (frame.empty()) throw std::invalid_argument("empty frame");

  const cv::Size size(t.width, t.height);
  const cv::Mat& src = fitted(to_bgr8(frame), size, fit, yuv ? 2 : 1);
  const bool shrink = size.width <= src.cols && size.height <= src.rows;
  // The frame at the target size, in BGR: `dst` itself when given (bgr8 targets), else resized_.
  auto sized_bgr = [&](cv::Mat* dst) -> const cv::Mat& {
    if (src.size() == size) {
      if (dst == nullptr) return src;
      src.copyTo(*dst);
      return *dst;
    }
    cv::Mat& out = dst != nullptr ? *dst : resized_;
    cv::resize(src, out, size, 0, 0, shrink ? cv::INTER_AREA : cv::INTER_LINEAR);
    return out;
  };
  auto* data = reinterpret_cast<std::uint8_t*>(t.data);
  auto check_in_place = [&](const cv::Mat& m) {  // OpenCV must have written into the target, not reallocated
    if (m.data != data) throw std::logic_error("frame conversion did not write into the target");
  };

  switch (t.pixel) {
    case PixelFormat::bgr8: {
      cv::Mat dst(size, CV_8UC3, data);
      sized_bgr(&dst);
      check_in_place(dst);
      return;
    }
    case PixelFormat::rgb8: {
      cv::Mat dst(size, CV_8UC3, data);
      cv::cvtColor(sized_bgr(nullptr), dst, cv::COLOR_BGR2RGB);
      check_in_place(dst);
      return;
    }
    case PixelFormat::gray8: {  // full range, 0.299 R + 0.587 G + 0.114 B (as testsrc)
      cv::Mat dst(size, CV_8UC1, data);
      cv::cvtColor(sized_bgr(nullptr), dst, cv::COLOR_BGR2GRAY);
      check_in_place(dst);
      return;
    }
    case PixelFormat::i420: {  // OpenCV's I420 is BT.601 limited range, chroma from each 2x2 block's top-left
      cv::Mat dst(t.height * 3 / 2, t.width, CV_8UC1, data);
      cv::cvtColor(sized_bgr(nullptr), dst, cv::COLOR_BGR2YUV_I420);
      check_in_place(dst);
      return;
    }
    case PixelFormat::nv12: {  // I420 planes, then U and V interleaved
      cv::cvtColor(sized_bgr(nullptr), i420_, cv::COLOR_BGR2YUV_I420);
      const std::size_t luma = static_cast<std::size_t>(t.width) * static_cast<std::size_t>(t.height);
      std::memcpy(data, i420_.data, luma);
      const int cw = t.width / 2, ch = t.height / 2;
      cv::Mat planes[2] = {cv::Mat(ch, cw, CV_8UC1, i420_.data + luma),
                           cv::Mat(ch, cw, CV_8UC1, i420_.data + luma + luma / 4)};
      cv::Mat uv(ch, cw, CV_8UC2, data + luma);
      cv::merge(planes, 2, uv);
      if (uv.data != data + luma) throw std::logic_error("frame conversion did not write into the target");
      return;
    }
  }
  throw std::invalid_argument("unknown pixel format " + std::to_string(static_cast<int>(t.pixel)));
}

}  // namespace sluice
