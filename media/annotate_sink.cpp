// annotate: a sink that draws each frame's top-k classes (the infer stage's `output: classes`) onto the source
// frame and writes, per input, a video (`<dir>/<name>.mp4` in mp4v, or `.avi` in MJPG) or a folder of images
// (`<dir>/<name>/<frame:06d>.jpg`). The frames come from the pipeline's FrameTap, which this stage creates and
// the source fills. Each output is written under a temporary name and committed atomically when every frame of
// the input is settled; names follow the sink stage's rule (stages/sink_outputs.hpp).
#include "media/annotate_sink.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <map>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/videoio.hpp>
#include <spdlog/spdlog.h>

#include "runtime/errors.hpp"
#include "runtime/frame_reader.hpp"
#include "media/scaled_frame_tap.hpp"
#include "stages/sink_outputs.hpp"
#include "stages/sink_records.hpp"

namespace sluice {
namespace {
namespace fs = std::filesystem;

// The tap's size when tap_frames is 0: four batches per stage up to the sink, at least 32, at most 512 MiB.
std::size_t auto_tap_frames(const StageInit& init, int width, int height) {
  const std::size_t per_frame = static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3;
  const std::size_t wanted = std::max<std::size_t>(
      32, 4 * static_cast<std::size_t>(std::max(init.batch_size, 1)) * static_cast<std::size_t>(init.index + 1));
  const std::size_t cap = std::max<std::size_t>(1, (std::size_t{512} << 20) / per_frame);
  return std::min(wanted, cap);
}

class AnnotateStage final : public Stage {
 public:
  explicit AnnotateStage(const StageInit& init)
      : name_(init.name), dir_(init.params.string("path")), images_(init.params.string("format") == "images"),
        avi_(init.params.string("container") == "avi"), fps_(init.params.number("fps")),
        width_(static_cast<int>(init.params.integer("width"))),
        height_(static_cast<int>(init.params.integer("height"))),
        jpeg_quality_(static_cast<int>(init.params.integer("jpeg_quality"))),
        retry_(init.name, init.params.number("write_retry_s")), shared_(init.shared), origins_(init.shared) {
    if (init.input->kind != PayloadKind::classes)
      throw ConfigError("draws classes: put an infer stage with 'output: classes' before it (input is " +
                        init.input->describe() + ")");
    if (init.input->memory == MemoryKind::device)
      throw ConfigError("reads host memory; put a download stage before it (input is " + init.input->describe() + ")");
    if (dir_.empty()) throw ConfigError("needs a 'path': the directory to write into");
    if (!init.shared) throw ConfigError("needs the pipeline's shared state (the frame tap)");
    if (images_ && init.params.was_given("container")) throw ConfigError("'container' applies to format: video only");
    const auto given = init.params.integer("tap_frames");
    const std::size_t capacity = given > 0 ? static_cast<std::size_t>(given) : auto_tap_frames(init, width_, height_);
    tap_ = std::make_shared<ScaledFrameTap>(width_, height_, capacity);  // cheap: its memory comes with the first frame
    init.shared->tap = tap_;
  }

  void open(StageContext& ctx) override {
    retry_.watch_stop(ctx.stop);
    sinks::create_directory_or_throw(dir_);
    // The lock first: a second run or daemon over this directory fails here, before it removes a temp.
    lock_ = sinks::lock_output(OutputLock::for_directory(dir_), "output directory '" + dir_.string() + "'", retry_);
    sinks::remove_stale_temps(dir_, name_);
    names_.open(dir_);
    bgr_.resize(static_cast<std::size_t>(width_) * static_cast<std::size_t>(height_) * 3);
  }

  BatchLease process(Batch* in, StageContext&) override {
    for (int i = 0; i < in->count; ++i) {
      const FrameMeta& f = in->frames[static_cast<std::size_t>(i)];
      Entry& e = entry(f);
      const bool have = tap_->take(f.source_id, f.sequence, bgr_);
      if (!have) {
        // Not silently skipped: a blank frame keeps the video's timeline, and the miss is counted and logged.
        std::fill(bgr_.begin(), bgr_.end(), std::uint8_t{48});
        if (e.missing++ == 0)
          spdlog::warn("stage '{}': frame {} of '{}' is not in the frame tap (evicted: it holds {} frames; raise "
                       "tap_frames); drawn on a blank frame",
                       name_, f.input ? f.input_frame : f.sequence, e.tracked ? e.uri : e.source, tap_->capacity());
        missing_total_.fetch_add(1, std::memory_order_relaxed);
      }
      cv::Mat image(height_, width_, CV_8UC3, bgr_.data());
      draw(image, *in, i);
      if (!have)
        cv::putText(image, "source frame missing", cv::Point(4, height_ - 6), cv::FONT_HERSHEY_SIMPLEX,
                    std::max(0.35, height_ / 720.0), cv::Scalar(0, 0, 255), 1, cv::LINE_AA);
      if (images_) write_image(e, image, f.input ? f.input_frame : f.sequence);
      else e.video.write(image);
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
    bool tracked = false, started = false;
    std::string source, uri, name;
    std::string temp;  // video: .<name>.sluice-tmp.<ext>; images: the folder .<name>.sluice-tmp
    cv::VideoWriter video;
    std::uint64_t frames = 0, missing = 0;
  };

  Entry& entry(const FrameMeta& f) {
    const std::uint64_t key = f.input != 0 ? f.input : (std::uint64_t{1} << 32) | f.source_id;
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      const sinks::Origin& o = origins_.of(f);
      Entry e;
      e.tracked = f.input != 0;
      e.source = o.source;
      e.uri = o.uri;
      it = entries_.emplace(key, std::move(e)).first;
    }
    if (!it->second.started) start(it->second);
    return it->second;
  }

  std::string extension() const { return avi_ ? ".avi" : ".mp4"; }

  // Claims the output's name and creates its temporary file or folder.
  void start(Entry& e) {
    if (e.name.empty()) e.name = e.tracked ? names_.for_input(e.uri, retry_) : names_.for_source(e.source, retry_);
    if (images_) {
      e.temp = sinks::temp_path(dir_, e.name).string();
      std::error_code ec;
      fs::remove_all(e.temp, ec);
      retry_.run("creating", e.temp, [&] { return ::mkdir(e.temp.c_str(), 0755) == 0 || errno == EEXIST ? 0 : errno; });
    } else {
      // The writer picks the container by extension, so the temporary name keeps it at the end.
      e.temp = (dir_ / ("." + e.name + ".sluice-tmp" + extension())).string();
      sinks::OutputFile probe;  // creating it ourselves first reports (and retries) errors with their errno
      probe.open(e.temp, sinks::OutputFile::Mode::truncate, retry_);
      probe.close();
      const int fourcc =
          avi_ ? cv::VideoWriter::fourcc('M', 'J', 'P', 'G') : cv::VideoWriter::fourcc('m', 'p', '4', 'v');
      if (!e.video.open(e.temp, fourcc, fps_, cv::Size(width_, height_), true)) {
        ::unlink(e.temp.c_str());
        throw StageError("cannot open a video writer (" + std::string(avi_ ? "MJPG in avi" : "mp4v in mp4") +
                         ") for '" + e.temp + "': OpenCV's video backends do not support it here");
      }
    }
    e.started = true;
  }

  void write_image(Entry& e, const cv::Mat& image, std::uint64_t frame) {
    if (!cv::imencode(".jpg", image, jpeg_, {cv::IMWRITE_JPEG_QUALITY, jpeg_quality_}))
      throw StageError("cannot encode a JPEG image");
    char file[32];
    std::snprintf(file, sizeof file, "/%06llu.jpg", static_cast<unsigned long long>(frame));
    sinks::OutputFile out;
    out.open(e.temp + file, sinks::OutputFile::Mode::truncate, retry_);
    out.append({reinterpret_cast<const char*>(jpeg_.data()), jpeg_.size()}, retry_);
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
      e.video.release();
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
    if (e.video.isOpened()) e.video.release();
    if (!e.temp.empty()) {
      std::error_code ec;
      fs::remove_all(e.temp, ec);
    }
  }

  // The top-k labels and scores, best first, in the top-left corner on a dark band.
  void draw(cv::Mat& image, const Batch& b, int i) const {
    const double scale = std::max(0.35, height_ / 720.0);
    const int thickness = std::max(1, static_cast<int>(scale * 2 + 0.5));
    const int margin = std::max(4, height_ / 60);
    int y = margin;
    bool first = true;
    char score[16];
    for (const kernels::ClassScore& c : sinks::class_scores(b.desc, b.item(i))) {
      std::snprintf(score, sizeof score, " %.2f", static_cast<double>(c.score));
      const std::string text = sinks::class_name(b.desc, c.index) + score;
      int baseline = 0;
      const cv::Size ts = cv::getTextSize(text, cv::FONT_HERSHEY_SIMPLEX, scale, thickness, &baseline);
      if (y + ts.height + baseline > height_) break;
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
  bool images_, avi_;
  double fps_;
  int width_, height_, jpeg_quality_;
  sinks::WriteRetry retry_;
  std::shared_ptr<PipelineShared> shared_;
  sinks::Origins origins_;
  OutputLock lock_;
  sinks::OutputNames names_;
  std::shared_ptr<ScaledFrameTap> tap_;
  std::map<std::uint64_t, Entry> entries_;  // by input id, or 1<<32 | source id for frames without one
  std::vector<std::uint8_t> bgr_;           // the frame being drawn
  std::vector<std::uint8_t> jpeg_;          // the image being written
  std::atomic<std::uint64_t> missing_total_{0};
};

}  // namespace

StageInfo annotate_stage() {
  return {
      "annotate",
      StageRole::sink,
      "draws each frame's top-k classes (an infer stage with output: classes) onto the source frame and writes one "
      "video (<path>/<name>.mp4 or .avi) or folder of images (<path>/<name>/<frame:06d>.jpg, frame = index in the "
      "input) per input, committed atomically when every frame of the input is settled (an input none of whose "
      "frames arrived gets none). Frames come from a copy the source keeps (the frame tap, width x height); a frame "
      "no longer there is drawn blank, counted and logged. Output names as the sink's (the input's file stem, made "
      "unique; frames without an input are named after their source); write failures block and retry as the sink's",
      {
          {"path", ParamType::string, "", "the directory to write into (created if missing)", {}, {}, {}, 0, true},
          {"format", ParamType::choice, "video",
           "video: one video file per input; images: one folder of JPEGs per input", {}, {}, {"video", "images"}},
          {"container", ParamType::choice, "mp4", "format video: mp4 (mp4v codec) or avi (MJPG)", {}, {},
           {"mp4", "avi"}},
          {"fps", ParamType::number, "25", "format video: frame rate written into the video", 0.1, 1000.0},
          {"width", ParamType::integer, "640", "width of the frames drawn and written (the source's are scaled)", 16.0,
           8192.0},
          {"height", ParamType::integer, "360", "height of the frames drawn and written", 16.0, 8192.0},
          {"jpeg_quality", ParamType::integer, "90", "format images: JPEG quality", 1.0, 100.0},
          {"tap_frames", ParamType::integer, "0",
           "frames the tap holds until this sink draws them; must exceed the frames in flight between source and sink "
           "(queue depths x batch size), or the oldest are evicted; 0 = 4 batches per stage up to here, at least 32, "
           "at most 512 MiB",
           0.0, 1e6},
          {"write_retry_s", ParamType::number, "30",
           "a write that fails for a reason that may pass blocks the sink and is retried every 0.1 s growing to 2 s; "
           "after this many seconds its frames (or its input) are counted failed with the path and reason; 0 = retry "
           "until it works (30 s once a stop was requested). A full disk, EIO and a read-only filesystem fail at once. "
           "The directory is locked like the sink's (<path>/.sluice-lock); an input's output is durable once committed",
           0.0},
      },
      [](const StageInit& init) -> std::unique_ptr<Stage> { return std::make_unique<AnnotateStage>(init); },
      [](const ParamValues& p) -> std::optional<StageOutput> {
        if (p.string("path").empty()) return std::nullopt;
        return StageOutput{p.string("path"), false};
      }};
}

void register_annotate_stage() { StageRegistry::add_builtin(annotate_stage()); }

}  // namespace sluice
