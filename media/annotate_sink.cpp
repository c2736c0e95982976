// annotate: a sink that draws each frame's detections (boxes with "label score #track" tags, a colour per track,
// or per class when untracked) or top-k classes onto the source frame and writes, per input, a video
// (`<dir>/<name>.mp4|.mkv|.avi`, H.264 through libavcodec when an encoder for it opens, else MPEG-4 part 2, each
// frame at its own time stamp, a file input's audio copied along) or a folder of images
// (`<dir>/<name>/<frame:06d>.jpg|.png`). The frames come from the pipeline's FrameTap, which this stage creates
// and the source fills, at the source's size unless a size is configured. Each output is written under a
// temporary name and committed atomically when every frame of the input is settled; names follow the sink
// stage's rule (runtime/sink_outputs.hpp).
#include "media/annotate_sink.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <map>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <spdlog/spdlog.h>

#include "runtime/errors.hpp"
#include "runtime/frame_reader.hpp"
#include "media/scaled_frame_tap.hpp"
#include "media/video_writer.hpp"
#include "runtime/sink_outputs.hpp"
#include "runtime/stage_registrar.hpp"
#include "runtime/sink_records.hpp"

namespace sluice {
namespace {
namespace fs = std::filesystem;

// The tap's size when tap_frames is 0: four batches per stage up to the sink, at least 32, at most kTapBytes.
constexpr std::size_t kTapBytes = std::size_t{512} << 20;
std::size_t auto_tap_frames(const StageInit& init, int width, int height) {
  const std::size_t per_frame = static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3;
  const std::size_t wanted = std::max<std::size_t>(
      32, 4 * static_cast<std::size_t>(std::max(init.batch_size, 1)) * static_cast<std::size_t>(init.index + 1));
  if (per_frame == 0) return wanted;  // the source's size: the tap cuts it to kTapBytes at the first frame
  const std::size_t cap = std::max<std::size_t>(1, kTapBytes / per_frame);
  return std::min(wanted, cap);
}

// Colours of boxes (BGR), bright enough for a dark tag text where the luminance is high, white otherwise.
constexpr std::array<std::array<std::uint8_t, 3>, 20> kPalette{{
    {56, 56, 255},  {151, 157, 255}, {31, 112, 255}, {29, 178, 255}, {49, 210, 207}, {10, 249, 72},  {23, 204, 146},
    {134, 219, 61}, {52, 147, 26},   {187, 212, 0},  {168, 153, 44}, {255, 194, 0},  {147, 69, 52},  {255, 115, 100},
    {236, 24, 0},   {255, 56, 132},  {133, 0, 82},   {255, 56, 203}, {200, 149, 255}, {199, 55, 255},
}};

// A box's colour: from its track id when tracked (the same track keeps it on every frame), else from its class;
// a fixed hash into the palette, so every run and every machine draws the same.
cv::Scalar box_colour(const kernels::Detection& d) {
  std::uint64_t key = d.track_id >= 0 ? static_cast<std::uint64_t>(d.track_id)
                                      : (std::uint64_t{1} << 40) + static_cast<std::uint32_t>(d.class_id);
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  key *= 0xc4ceb9fe1a85ec53ULL;
  key ^= key >> 33;
  const auto& c = kPalette[key % kPalette.size()];
  return {static_cast<double>(c[0]), static_cast<double>(c[1]), static_cast<double>(c[2])};
}

// Printable ASCII only, at most `limit` characters (the Hershey fonts have nothing else).
std::string printable(const std::string& s, std::size_t limit) {
  std::string text;
  for (const char c : s) {
    if (text.size() == limit) {
      text += "...";
      break;
    }
    text += c >= 0x20 && c < 0x7f ? c : '?';
  }
  return text;
}

// What a tag says: the label (at most kMaxLabel characters), the score, "#id" when tracked, and what secondary
// models said of the box ("colour red 0.93").
constexpr std::size_t kMaxLabel = 40;
std::string tag_text(const std::string& label, const kernels::Detection& d, const std::string& attributes) {
  char tail[48];
  const double score = std::isfinite(d.score) ? std::clamp(static_cast<double>(d.score), -1e6, 1e6) : 0.0;
  if (d.track_id >= 0) std::snprintf(tail, sizeof tail, " %.2f #%d", score, static_cast<int>(d.track_id));
  else std::snprintf(tail, sizeof tail, " %.2f", score);
  return printable(label, kMaxLabel) + tail + (attributes.empty() ? "" : " " + printable(attributes, 2 * kMaxLabel));
}

// A box in source-frame pixels (edges), scaled by sx, sy, as the pixel rectangle it covers on a width x height
// image; false when it is not finite or lies wholly outside.
bool box_pixels(const kernels::Detection& d, double sx, double sy, int width, int height, cv::Rect& r) {
  double x1 = d.x1, y1 = d.y1, x2 = d.x2, y2 = d.y2;
  if (!std::isfinite(x1) || !std::isfinite(y1) || !std::isfinite(x2) || !std::isfinite(y2)) return false;
  if (x2 < x1) std::swap(x1, x2);
  if (y2 < y1) std::swap(y1, y2);
  x1 *= sx, x2 *= sx, y1 *= sy, y2 *= sy;
  if (x2 <= 0 || y2 <= 0 || x1 >= width || y1 >= height) return false;
  const int l = static_cast<int>(std::clamp(std::floor(x1), 0.0, width - 1.0));
  const int t = static_cast<int>(std::clamp(std::floor(y1), 0.0, height - 1.0));
  const int rr = std::max(l, static_cast<int>(std::clamp(std::ceil(x2) - 1, 0.0, width - 1.0)));
  const int b = std::max(t, static_cast<int>(std::clamp(std::ceil(y2) - 1, 0.0, height - 1.0)));
  r = cv::Rect(l, t, rr - l + 1, b - t + 1);
  return true;
}

// `format`: images (a folder per input) or a video file.
constexpr Choice<bool> kImagesChoices[] = {{"video", false}, {"images", true}};
// `image_format`: png or jpeg.
constexpr Choice<bool> kPngChoices[] = {{"jpeg", false}, {"png", true}};
// The spelling is also the video file's extension.
constexpr Choice<VideoContainer> kContainerChoices[] = {
    {"mp4", VideoContainer::mp4}, {"mkv", VideoContainer::mkv}, {"avi", VideoContainer::avi}};
constexpr Choice<VideoEncoding> kCodecChoices[] = {
    {"auto", VideoEncoding::automatic}, {"h264", VideoEncoding::h264}, {"mpeg4", VideoEncoding::mpeg4}};

class AnnotateStage final : public Stage {
 public:
  explicit AnnotateStage(const StageInit& init)
      : name_(init.name), dir_(init.params.string("path")), images_(init.params.choice("format", kImagesChoices)),
        png_(init.params.choice("image_format", kPngChoices)), container_(init.params.string("container")),
        detections_(init.input && init.input->kind == PayloadKind::detections),
        width_(static_cast<int>(init.params.integer("width"))),
        height_(static_cast<int>(init.params.integer("height"))),
        jpeg_quality_(static_cast<int>(init.params.integer("jpeg_quality"))),
        retry_(init.name, init.params.number("write_retry_s")), shared_(init.shared), origins_(init.shared) {
    video_.container = init.params.choice("container", kContainerChoices);
    video_.codec = init.params.choice("codec", kCodecChoices);
    video_.fallback_fps = init.params.number("fps");
    video_.quality = static_cast<int>(init.params.integer("quality"));
    audio_ = init.params.boolean("audio");
    if (init.input->kind != PayloadKind::classes && init.input->kind != PayloadKind::detections)
      throw ConfigError("draws detections or classes: put an infer stage with 'output: detections' or 'output: "
                        "classes' before it (input is " + init.input->describe() + ")");
    if (init.input->memory == MemoryKind::device)
      throw ConfigError("reads host memory; put a download stage before it (input is " + init.input->describe() + ")");
    if (dir_.empty()) throw ConfigError("needs a 'path': the directory to write into");
    if (!init.shared) throw ConfigError("needs the pipeline's shared state (its inputs)");
    if (images_) {
      for (const char* key : {"container", "codec", "quality", "audio"})
        if (init.params.was_given(key)) throw ConfigError(std::string("'") + key + "' applies to format: video only");
    } else if (init.params.was_given("image_format")) {
      throw ConfigError("'image_format' applies to format: images only");
    }
    if ((width_ == 0) != (height_ == 0))
      throw ConfigError("give both 'width' and 'height', or neither (the source's size)");
    if (width_ != 0 && (width_ < 16 || height_ < 16))
      throw ConfigError("'width' and 'height' are at least 16 (0: the source's size)");
    // The source's size: known here after a preprocess stage (the geometry the boxes are mapped through), else
    // the tap takes it from the first frame.
    const SourceGeometry& g = init.input->geometry;
    if (width_ == 0 && g.known() && g.frame_height > 0) {
      width_ = g.frame_width;
      height_ = g.frame_height;
    }
    if (g.known() && g.frame_height > 0) source_ = {g.frame_width, g.frame_height};
    const auto given = init.params.integer("tap_frames");
    const std::size_t capacity = given > 0 ? static_cast<std::size_t>(given) : auto_tap_frames(init, width_, height_);
    // cheap: its memory comes with the first frame
    tap_ = std::make_shared<ScaledFrameTap>(width_, height_, capacity, given > 0 ? 0 : kTapBytes);
  }

  std::shared_ptr<FrameTap> frame_tap() const override { return tap_; }

  void open(StageContext& ctx) override {
    retry_.watch_stop(ctx.stop);
    sinks::create_directory_or_throw(dir_);
    // The lock first: a second run or daemon over this directory fails here, before it removes a temp.
    lock_ = sinks::lock_output(OutputLock::for_directory(dir_), "output directory '" + dir_.string() + "'", retry_);
    sinks::remove_stale_temps(dir_, name_);
    names_.open(dir_);
  }

  BatchLease process(Batch* in, StageContext&) override {
    for (int i = 0; i < in->count; ++i) {
      const FrameMeta& f = in->frames[static_cast<std::size_t>(i)];
      Entry& e = entry(f);
      ScaledFrameTap::SourceSize source;
      const bool have = tap_->take(f.source_id, f.sequence, bgr_, &source);
      // The size drawn at: the tap's (configured, or the first source frame's); before any frame reached the
      // tap, the source's from the geometry, else 640x360.
      int width = tap_->width(), height = tap_->height();
      if (width == 0) {
        const bool known = source_.width > 0 && source_.height > 0;
        width = known ? source_.width : 640;
        height = known ? source_.height : 360;
      }
      if (!have) {
        // Not silently skipped: a blank frame keeps the video's timeline, and the miss is counted and logged.
        bgr_.assign(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3, std::uint8_t{48});
        source = source_;
        if (e.missing++ == 0)
          spdlog::warn("stage '{}': frame {} of '{}' is not in the frame tap (evicted: it holds {} frames; raise "
                       "tap_frames); drawn on a blank frame",
                       name_, f.input ? f.input_frame : f.sequence, e.tracked ? e.uri : e.source, tap_->capacity());
        missing_total_.fetch_add(1, std::memory_order_relaxed);
      }
      if (source.width <= 0 || source.height <= 0) source = {width, height};
      cv::Mat image(height, width, CV_8UC3, bgr_.data());
      if (detections_) draw_detections(image, *in, i, static_cast<double>(width) / source.width,
                                       static_cast<double>(height) / source.height);
      else draw_classes(image, *in, i);
      if (!have)
        cv::putText(image, "source frame missing", cv::Point(4, height - 6), cv::FONT_HERSHEY_SIMPLEX,
                    std::max(0.35, height / 720.0), cv::Scalar(0, 0, 255), 1, cv::LINE_AA);
      // The console shows drawn pictures where there are some (costs nothing while nobody watches).
      if (have && shared_->tap) shared_->tap->put_drawn(f, {reinterpret_cast<std::byte*>(image.data), width, height, PixelFormat::bgr8});
      if (images_) {
        write_image(e, image, f.input ? f.input_frame : f.sequence);
      } else {
        if (!e.video) open_video(e, width, height);
        if (width != e.width || height != e.height) {  // a source of another size on the same output: fitted
          cv::Mat fitted;
          cv::resize(image, fitted, cv::Size(e.width, e.height), 0, 0, cv::INTER_AREA);
          e.video->write(fitted.data, f.pts_ns);
        } else {
          e.video->write(bgr_.data(), f.pts_ns);
        }
      }
      ++e.frames;
    }
    return {};
  }

  std::vector<std::string> finish_input(const InputProgress& input, StageContext&) override {
    origins_.forget(input.id);
    auto it = entries_.find(input.id);
    if (input.interrupted && !is_live(input.kind)) {  // the job redoes it: nothing is committed
      if (it != entries_.end()) {
        discard(it->second);
        entries_.erase(it);
      }
      return {};
    }
    if (it == entries_.end()) return {};  // none of its frames reached this sink: there is nothing to show
    std::string path;
    try {
      path = commit(it->second);
    } catch (const std::exception& e) {
      discard(it->second);  // the input fails (it is not recorded done); a redo writes it again
      entries_.erase(it);
      shared_->inputs.output_failed(input.id, e.what());  // the run reports it and exits 1
      throw;
    }
    entries_.erase(it);
    return {path};
  }

  void close(StageContext&) override {
    std::string first_error;
    for (auto& [key, e] : entries_) {
      if (e.tracked) {
        discard(e);  // an input that never completed: the job ledger will redo it
        continue;
      }
      try {
        commit(e);  // frames without an input: their stream ended with the run
      } catch (const std::exception& ex) {
        discard(e);
        if (first_error.empty()) first_error = ex.what();
      }
    }
    entries_.clear();
    lock_.release();
    if (!first_error.empty()) throw StageError(first_error);
  }

  std::string health() const override {
    std::string h = retry_.health();
    if (const auto missing = missing_total_.load(std::memory_order_relaxed)) {
      if (!h.empty()) h += "; ";
      h += std::to_string(missing) + " frames were not in the frame tap (drawn blank; raise tap_frames)";
    }
    return h;
  }

 private:
  struct Entry {
    bool tracked = false, started = false, live = false;
    std::string source, uri, name;
    std::string temp;  // video: .<name>.sluice-tmp.<ext>; images: the folder .<name>.sluice-tmp
    std::unique_ptr<VideoWriter> video;  // opened at the first frame (its size)
    int width = 0, height = 0;           // the video's
    std::uint64_t frames = 0, missing = 0;
  };

  Entry& entry(const FrameMeta& f) {
    const std::uint64_t key = f.input != 0 ? f.input : (std::uint64_t{1} << 32) | f.source_id;
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      const sinks::Origin& o = origins_.of(f);
      Entry e;
      e.tracked = f.input != 0;
      e.live = o.live;
      e.source = o.source;
      e.uri = o.uri;
      it = entries_.emplace(key, std::move(e)).first;
    }
    if (!it->second.started) start(it->second);
    return it->second;
  }

  std::string extension() const { return "." + container_; }

  // Claims the output's name and creates its temporary file or folder.
  void start(Entry& e) {
    if (e.name.empty()) e.name = e.tracked ? names_.for_input(e.uri, retry_) : names_.for_source(e.source, retry_);
    if (images_) {
      e.temp = sinks::temp_path(dir_, e.name).string();
      std::error_code ec;
      fs::remove_all(e.temp, ec);
      retry_.run("creating", e.temp, [&] { return ::mkdir(e.temp.c_str(), 0755) == 0 || errno == EEXIST ? 0 : errno; });
    } else {
      // The temporary name keeps the container's extension at the end, as players expect.
      e.temp = (dir_ / ("." + e.name + ".sluice-tmp" + extension())).string();
      sinks::OutputFile probe;  // creating it ourselves first reports (and retries) errors with their errno
      probe.open(e.temp, sinks::OutputFile::Mode::truncate, retry_);
      probe.close();
    }
    e.started = true;
  }

  void open_video(Entry& e, int width, int height) {
    VideoWriterOptions options = video_;
    std::error_code ec;
    // The input's audio: from files (a camera or stream cannot be read twice).
    if (audio_ && e.tracked && !e.live && fs::is_regular_file(e.uri, ec)) options.audio_from = e.uri;
    try {
      e.video = std::make_unique<VideoWriter>(e.temp, width, height, options);
    } catch (const std::exception& ex) {
      ::unlink(e.temp.c_str());
      throw StageError(ex.what());
    }
    e.width = width;
    e.height = height;
    if (!logged_codec_) {
      logged_codec_ = true;
      spdlog::info("stage '{}': writing {} in {} ({}x{})", name_, e.video->codec_name(), container_, width, height);
    }
  }

  void write_image(Entry& e, const cv::Mat& image, std::uint64_t frame) {
    const bool ok = png_ ? cv::imencode(".png", image, encoded_, {cv::IMWRITE_PNG_COMPRESSION, 3})
                         : cv::imencode(".jpg", image, encoded_, {cv::IMWRITE_JPEG_QUALITY, jpeg_quality_});
    if (!ok) throw StageError(png_ ? "cannot encode a PNG image" : "cannot encode a JPEG image");
    char file[32];
    std::snprintf(file, sizeof file, "/%06llu.%s", static_cast<unsigned long long>(frame), png_ ? "png" : "jpg");
    sinks::OutputFile out;
    out.open(e.temp + file, sinks::OutputFile::Mode::truncate, retry_);
    out.append({reinterpret_cast<const char*>(encoded_.data()), encoded_.size()}, retry_);
    out.close();
  }

  // Makes the temporary output durable and renames it into place; returns the final path.
  std::string commit(Entry& e) {
    if (!e.started) start(e);
    if (e.missing)
      spdlog::warn("stage '{}': {} of {} frames of '{}' were not in the frame tap and were drawn blank", name_,
                   e.missing, e.frames, e.tracked ? e.uri : e.source);
    const fs::path final_path = dir_ / (images_ ? e.name : e.name + extension());
    if (images_) {
      retry_.run("syncing", e.temp, [&] {  // every image of the folder, in one call
        const int fd = ::open(e.temp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) return errno;
        const int err = ::syncfs(fd) == 0 ? 0 : errno;
        ::close(fd);
        return err;
      });
    } else {
      if (!e.video) open_video(e, std::max(tap_->width(), 16), std::max(tap_->height(), 16));  // no frames: empty
      try {
        e.video->finish();
      } catch (const std::exception& ex) {
        throw StageError(ex.what());
      }
      e.video.reset();
      std::error_code ec;
      const auto size = fs::file_size(e.temp, ec);
      if (ec || (size == 0 && e.frames > 0))
        throw StageError("the video writer left nothing in '" + e.temp + "'" + (ec ? ": " + ec.message() : ""));
      sinks::OutputFile file;
      file.open(e.temp, sinks::OutputFile::Mode::append, retry_);
      file.sync(retry_);
      file.close();
    }
    sinks::commit_rename(e.temp, final_path, retry_);
    e.temp.clear();
    return final_path.string();
  }

  void discard(Entry& e) noexcept {
    e.video.reset();  // closes the file without a trailer: it is removed below
    if (!e.temp.empty()) {
      std::error_code ec;
      fs::remove_all(e.temp, ec);
    }
  }

  // Each box: its rectangle, and a tag "label score #track" on a filled band of the box's colour, above the box
  // where there is room, else inside it. Boxes are in source-frame pixels, scaled by sx, sy to the image;
  // boxes that are not finite or lie outside are skipped, the rest clipped.
  void draw_detections(cv::Mat& image, const Batch& b, int i, double sx, double sy) const {
    const int width = image.cols, height = image.rows;
    const int line = std::max(2, static_cast<int>(std::lround(std::min(width, height) / 360.0)));
    const double scale = std::max(0.35, std::min(width, height) / 1800.0);
    const int text_thickness = std::max(1, static_cast<int>(std::lround(scale * 1.5)));
    const auto boxes = sinks::detections(b.desc, b.item(i));
    for (std::size_t slot = 0; slot < boxes.size(); ++slot) {
      const kernels::Detection& d = boxes[slot];
      cv::Rect r;
      if (!box_pixels(d, sx, sy, width, height, r)) continue;
      const cv::Scalar colour = box_colour(d);
      cv::rectangle(image, r, colour, line, cv::LINE_8);
      const std::string attributes = sinks::attributes_text(b.desc, b.item(i), slot);
      const std::string text = tag_text(sinks::class_name(b.desc, d.class_id), d, attributes);
      int baseline = 0;
      const cv::Size ts = cv::getTextSize(text, cv::FONT_HERSHEY_SIMPLEX, scale, text_thickness, &baseline);
      const int tag_h = ts.height + baseline + 4;
      const int tag_w = std::min(ts.width + 6, width);
      const int top = r.y - tag_h >= 0 ? r.y - tag_h : std::min(r.y, std::max(0, height - tag_h));
      const int left = std::clamp(r.x - line / 2, 0, std::max(0, width - tag_w));
      cv::rectangle(image, cv::Rect(left, top, tag_w, std::min(tag_h, height - top)), colour, cv::FILLED);
      const double luma = 0.114 * colour[0] + 0.587 * colour[1] + 0.299 * colour[2];
      cv::putText(image, text, cv::Point(left + 3, top + ts.height + 2), cv::FONT_HERSHEY_SIMPLEX, scale,
                  luma > 140 ? cv::Scalar(0, 0, 0) : cv::Scalar(255, 255, 255), text_thickness, cv::LINE_AA);
    }
  }

  // The top-k labels and scores, best first, in the top-left corner on a dark band.
  void draw_classes(cv::Mat& image, const Batch& b, int i) const {
    const int height = image.rows;
    const double scale = std::max(0.35, height / 720.0);
    const int thickness = std::max(1, static_cast<int>(scale * 2 + 0.5));
    const int margin = std::max(4, height / 60);
    int y = margin;
    bool first = true;
    char score[16];
    for (const kernels::ClassScore& c : sinks::class_scores(b.desc, b.item(i))) {
      std::snprintf(score, sizeof score, " %.2f", static_cast<double>(c.score));
      const std::string text = sinks::class_name(b.desc, c.index) + score;
      int baseline = 0;
      const cv::Size ts = cv::getTextSize(text, cv::FONT_HERSHEY_SIMPLEX, scale, thickness, &baseline);
      if (y + ts.height + baseline > height) break;
      cv::rectangle(image, cv::Point(margin / 2, y),
                    cv::Point(margin + ts.width + margin / 2, y + ts.height + baseline + 4), cv::Scalar(0, 0, 0),
                    cv::FILLED);
      cv::putText(image, text, cv::Point(margin, y + ts.height + 2), cv::FONT_HERSHEY_SIMPLEX, scale,
                  first ? cv::Scalar(80, 255, 80) : cv::Scalar(255, 255, 255), thickness, cv::LINE_AA);
      y += ts.height + baseline + 6;
      first = false;
    }
  }

  std::string name_;
  fs::path dir_;
  bool images_, png_;
  std::string container_;
  bool detections_;
  int width_, height_, jpeg_quality_;  // width_ 0: the source's (the tap's, from the first frame)
  ScaledFrameTap::SourceSize source_;  // the source's size when the geometry tells it, else 0x0
  VideoWriterOptions video_;
  bool audio_ = true, logged_codec_ = false;
  sinks::WriteRetry retry_;
  std::shared_ptr<PipelineShared> shared_;
  sinks::Origins origins_;
  OutputLock lock_;
  sinks::OutputNames names_;
  std::shared_ptr<ScaledFrameTap> tap_;
  std::map<std::uint64_t, Entry> entries_;  // by input id, or 1<<32 | source id for frames without one
  std::vector<std::uint8_t> bgr_;           // the frame being drawn
  std::vector<std::uint8_t> encoded_;       // the image being written
  std::atomic<std::uint64_t> missing_total_{0};
};

}  // namespace

StageInfo annotate_stage() {
  return {
      "annotate",
      StageRole::sink,
      "draws each frame's detections (an infer stage with output: detections, optionally a track stage: each box, "
      "with a tag 'label score #track' on a band of its colour; one colour per track id, or per class when "
      "untracked, the same in every run) or top-k classes (output: classes) onto the source frame and writes one "
      "video (<path>/<name>.mp4, .mkv or .avi: H.264 through libavcodec, libx264 first, else MPEG-4 part 2 with a "
      "logged line; every frame at its own time stamp, variable rates kept) or folder of images "
      "(<path>/<name>/<frame:06d>.jpg or .png, frame = index in the input) per input, committed atomically when "
      "every frame of the input is settled (an input none of whose frames arrived gets none). Frames come from a "
      "copy the source keeps (the frame tap) at the source's size unless width and height are given; a frame no "
      "longer there is drawn blank, counted and logged. Output names as the sink's (the input's file stem, made "
      "unique; frames without an input are named after their source); write failures block and retry as the sink's",
      {
          {"path", ParamType::string, "", "the directory to write into (created if missing)", {}, {}, {}, 0, true},
          {"format", ParamType::choice, "video",
           "video: one video file per input; images: one folder of images per input", {}, {},
           choice_names(kImagesChoices)},
          {"container", ParamType::choice, "mp4",
           "format video: mp4, mkv (each frame at its own time stamp) or avi (one rate: stamps rounded to frame "
           "slots of 1/fps, skipped slots left out)",
           {}, {}, choice_names(kContainerChoices)},
          {"codec", ParamType::choice, "auto",
           "format video: auto (H.264 when an encoder for it opens, libx264 first; else MPEG-4 part 2, logged), h264 "
           "(fail without one) or mpeg4",
           {}, {}, choice_names(kCodecChoices)},
          {"quality", ParamType::integer, "23",
           "format video: libx264's CRF (0 lossless, 51 worst; 18-28 usual); MPEG-4: quantiser quality / 8", 0.0, 51.0},
          {"fps", ParamType::number, "25",
           "format video: the rate of frames whose time stamps do not advance (each is placed one 1/fps after the one "
           "before) and the rate hint written into the video; avi: its one rate. Frames normally keep their own "
           "stamps: the container's for files and streams, the test pattern's own fps for testsrc",
           0.1, 1000.0},
          {"audio", ParamType::boolean, "true",
           "format video: copy the input's first audio stream (packets as they are, on the frames' clock, from the "
           "first frame to the end of the last) when the input is a file and the container can hold its codec; "
           "cameras and streams get none"},
          {"width", ParamType::integer, "0",
           "width of the frames drawn and written (the source's are scaled, boxes with them); 0 = the source's "
           "(with height 0)",
           0.0, 8192.0},
          {"height", ParamType::integer, "0", "height of the frames drawn and written; 0 = the source's (with width 0)",
           0.0, 8192.0},
          {"image_format", ParamType::choice, "jpeg", "format images: jpeg (.jpg) or png (.png, lossless)", {}, {},
           choice_names(kPngChoices)},
          {"jpeg_quality", ParamType::integer, "90", "format images: JPEG quality", 1.0, 100.0},
          {"tap_frames", ParamType::integer, "0",
           "frames the tap holds until this sink draws them; must exceed the frames in flight between source and sink "
           "(queue depths x batch size), or the oldest are evicted; 0 = 4 batches per stage up to here, at least 32, "
           "at most 512 MiB",
           0.0, 1e6},
          sinks::write_retry_param("The directory is locked like the sink's (<path>/.sluice-lock); an input's output "
                                   "is durable once committed"),
      },
      [](const StageInit& init) -> std::unique_ptr<Stage> { return std::make_unique<AnnotateStage>(init); },
      [](const ParamValues& p) -> std::optional<StageOutput> {
        if (p.string("path").empty()) return std::nullopt;
        return StageOutput{p.string("path"), false};
      }};
}

SLUICE_REGISTER_STAGE(annotate_stage);

}  // namespace sluice
