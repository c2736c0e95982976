// The annotate sink, driven directly: frames go into its frame tap as the source would put them, batches of
// classes are built here; the video is read back with OpenCV and the images are checked on disk.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/videoio.hpp>

#include "kernels/topk.hpp"
#include "media/annotate_sink.hpp"
#include "media/scaled_frame_tap.hpp"
#include "runtime/errors.hpp"
#include "runtime/frame_tap.hpp"
#include "runtime/stage.hpp"
#include "stages/sink_outputs.hpp"
#include "../stage_params.hpp"

using namespace sluice;
namespace fs = std::filesystem;
using sluice::test::params_of;
using Catch::Matchers::Contains;

namespace {

using Params = std::map<std::string, std::string>;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("sluice_annotate_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir;
}


constexpr int kWidth = 96, kHeight = 64;  // the tap's and the output's size
constexpr int kSourceWidth = 160, kSourceHeight = 120;

PayloadDesc classes_desc() {
  PayloadDesc d;
  d.kind = PayloadKind::classes;
  d.batch = 8;
  d.channels = 2;
  d.classes = 2;
  d.labels = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"cat", "dog"});
  return d;
}

struct Rig {
  std::shared_ptr<PipelineShared> shared = std::make_shared<PipelineShared>();
  ParamValues params;
  PayloadDesc desc = classes_desc();
  std::unique_ptr<Stage> stage;
  StageContext ctx;
  std::vector<std::byte> picture = std::vector<std::byte>(image_bytes(PixelFormat::bgr8, kSourceWidth, kSourceHeight),
                                                          std::byte{200});  // a light grey source frame

  explicit Rig(Params given) {
    given.emplace("width", std::to_string(kWidth));
    given.emplace("height", std::to_string(kHeight));
    params = params_of(annotate_stage(), given);
    shared->inputs.name_source(0, "cam");
    StageInit init{"annotate", params, desc};
    init.stage_names = {"decode", "infer", "annotate"};
    init.index = 2;
    init.shared = shared;
    stage = annotate_stage().make(init);
  }

  std::string health() const { return stage->health(); }

  // The source's side: its frames go into the tap (all but those in `skip`).
  std::vector<FrameMeta> decode(std::uint32_t input, std::uint64_t first_sequence, int n, std::set<int> skip = {}) {
    std::vector<FrameMeta> frames;
    for (int i = 0; i < n; ++i) {
      FrameMeta f;
      f.sequence = first_sequence + static_cast<std::uint64_t>(i);
      f.input = input;
      f.input_frame = static_cast<std::uint64_t>(i);
      if (!skip.count(i))
        shared->tap->put(f, FrameTarget{picture.data(), kSourceWidth, kSourceHeight, PixelFormat::bgr8});
      frames.push_back(f);
    }
    return frames;
  }

  void process(const std::vector<FrameMeta>& frames) {
    Batch b;
    b.desc = desc;
    b.count = static_cast<int>(frames.size());
    b.memory = Memory(MemoryKind::host, desc.batch_bytes());
    b.frames = frames;
    for (int i = 0; i < b.count; ++i) {
      auto* scores = reinterpret_cast<kernels::ClassScore*>(b.item(i));
      scores[0] = {0.9f, i % 2};
      scores[1] = {0.1f, (i + 1) % 2};
    }
    stage->process(&b, ctx);
  }

  std::vector<std::string> finish(const std::vector<FrameMeta>& frames) {
    shared->inputs.settle(frames, FrameFate::delivered);
    std::vector<std::string> out;
    for (const auto& p : shared->inputs.take_completed())
      for (auto& path : stage->finish_input(p, ctx)) out.push_back(path);
    return out;
  }

  std::uint32_t begin_input(const std::string& uri, int frames) {
    const std::uint32_t id = shared->inputs.begin(0, uri, InputKind::file, frames);
    shared->inputs.decoded(id, static_cast<std::uint64_t>(frames));
    shared->inputs.end(id);
    return id;
  }
};

int count_frames(const fs::path& video, cv::Size& size) {
  cv::VideoCapture cap(video.string());
  REQUIRE(cap.isOpened());
  int n = 0;
  for (cv::Mat frame; cap.read(frame); ++n) size = frame.size();
  return n;
}

// The labels are drawn at the top left on a dark band: the light grey picture has dark pixels there, and
// stays light grey at the bottom right.
void check_drawn(const cv::Mat& image) {
  REQUIRE(image.rows == kHeight);
  REQUIRE(image.cols == kWidth);
  double darkest = 0;
  cv::minMaxLoc(image(cv::Rect(0, 0, kWidth / 2, kHeight / 4)).reshape(1), &darkest);
  CHECK(darkest < 60);
  const cv::Vec3b corner = image.at<cv::Vec3b>(kHeight - 2, kWidth - 2);
  CHECK(std::abs(int(corner[1]) - 200) < 30);
}

}  // namespace

TEST_CASE("annotate writes one video per input with every frame, committed when the input is done", "[annotate]") {
  for (const std::string container : {"avi", "mp4"}) {
    INFO("container " << container);
    const fs::path dir = fresh_dir("video_" + container);
    Rig rig({{"path", dir.string()}, {"format", "video"}, {"container", container}, {"fps", "10"}});
    REQUIRE(rig.shared->tap);
    const auto* tap = dynamic_cast<const ScaledFrameTap*>(rig.shared->tap.get());
    REQUIRE(tap);
    CHECK(tap->width() == kWidth);
    rig.stage->open(rig.ctx);
    const std::uint32_t a = rig.begin_input("/videos/street.mp4", 7);
    const auto frames = rig.decode(a, 0, 7);
    rig.process({frames.begin(), frames.begin() + 4});
    rig.process({frames.begin() + 4, frames.end()});
    const fs::path video = dir / ("street." + container);
    CHECK_FALSE(fs::exists(video));
    CHECK(fs::exists(dir / (".street.sluice-tmp." + container)));
    REQUIRE(rig.finish(frames) == std::vector<std::string>{video.string()});
    CHECK_FALSE(fs::exists(dir / (".street.sluice-tmp." + container)));
    rig.stage->close(rig.ctx);
    cv::Size size;
    CHECK(count_frames(video, size) == 7);
    CHECK(size == cv::Size(kWidth, kHeight));
    cv::VideoCapture cap(video.string());
    cv::Mat first;
    REQUIRE(cap.read(first));
    check_drawn(first);
    CHECK(rig.health().empty());
    fs::remove_all(dir);
  }
}

TEST_CASE("annotate writes images per input and draws a frame missing from the tap blank", "[annotate]") {
  const fs::path dir = fresh_dir("images");
  Rig rig({{"path", dir.string()}, {"format", "images"}});
  rig.stage->open(rig.ctx);
  const std::uint32_t a = rig.begin_input("/videos/walk.mp4", 5);
  const auto frames = rig.decode(a, 10, 5, {3});  // frame 3 never reached the tap
  rig.process(frames);
  CHECK_FALSE(fs::exists(dir / "walk"));
  CHECK(fs::exists(dir / ".walk.sluice-tmp" / "000004.jpg"));
  REQUIRE(rig.finish(frames) == std::vector<std::string>{(dir / "walk").string()});
  for (int i = 0; i < 5; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "%06d.jpg", i);
    INFO(name);
    const cv::Mat image = cv::imread((dir / "walk" / name).string());
    REQUIRE_FALSE(image.empty());
    if (i != 3) check_drawn(image);
  }
  CHECK_THAT(rig.health(), Contains("1 frames were not in the frame tap"));

  // A second input that never completes leaves nothing behind after close().
  const std::uint32_t b = rig.shared->inputs.begin(0, "/videos/long.mp4", InputKind::file, 100);
  rig.shared->inputs.decoded(b, 2);
  rig.process(rig.decode(b, 20, 2));
  CHECK(fs::exists(dir / ".long.sluice-tmp"));
  rig.stage->close(rig.ctx);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{".sluice-lock", ".sluice-names", "walk"});
  fs::remove_all(dir);
}

TEST_CASE("annotate redoes an input over its earlier output and names untracked frames by source", "[annotate]") {
  const fs::path dir = fresh_dir("redo");
  for (int run = 0; run < 2; ++run) {
    INFO("run " << run);
    Rig rig({{"path", dir.string()}, {"format", "images"}});
    rig.stage->open(rig.ctx);
    const std::uint32_t a = rig.begin_input("/videos/walk.mp4", 2 + run);
    const auto frames = rig.decode(a, 0, 2 + run);
    rig.process(frames);
    rig.finish(frames);
    rig.process(rig.decode(0, 100, 3));  // a source without inputs (a test pattern)
    rig.stage->close(rig.ctx);
    std::size_t images = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir / "walk")) ++images;
    CHECK(images == static_cast<std::size_t>(2 + run));  // the folder was swapped, not merged
    CHECK(fs::exists(dir / "cam" / "000102.jpg"));
  }
  fs::remove_all(dir);
}

TEST_CASE("annotate takes classes only and registers itself", "[annotate]") {
  PayloadDesc frames;
  frames.kind = PayloadKind::frames;
  ParamValues params = params_of(annotate_stage(), {{"path", "/tmp/x"}});
  StageInit init{"annotate", params, frames};
  init.shared = std::make_shared<PipelineShared>();
  CHECK_THROWS_AS(annotate_stage().make(init), ConfigError);
  register_annotate_stage();
  const StageInfo* info = StageRegistry::builtin().find("annotate");
  REQUIRE(info);
  CHECK(info->role == StageRole::sink);
  CHECK_THAT(describe_stage(*info), Contains("tap_frames") && Contains("container"));
}
