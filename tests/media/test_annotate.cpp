// The annotate sink, driven directly: frames go into its frame tap as the source would put them, batches of
// classes or detections are built here; videos are read back with libavformat/libavcodec (frames, time stamps,
// codec) and images with OpenCV.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

#include "kernels/detect.hpp"
#include "kernels/topk.hpp"
#include "config/pipeline_spec.hpp"
#include "config/plan.hpp"
#include "media/annotate_sink.hpp"
#include "media/scaled_frame_tap.hpp"
#include "runtime/errors.hpp"
#include "runtime/frame_tap.hpp"
#include "runtime/stage.hpp"
#include "runtime/sink_outputs.hpp"
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

PayloadDesc detections_desc(int max_boxes = 4) {
  PayloadDesc d;
  d.kind = PayloadKind::detections;
  d.batch = 8;
  d.channels = max_boxes;
  d.classes = 3;
  d.labels = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"person", "car", "dog"});
  return d;
}

// The boxes of one frame (and the header's count, which a hostile producer may set to anything).
struct FrameBoxes {
  std::vector<kernels::Detection> boxes;
  std::int32_t count = -1;  // -1: boxes.size()
};

kernels::Detection box(float x1, float y1, float x2, float y2, int track = -1, int cls = 0, float score = 0.9f) {
  return {x1, y1, x2, y2, score, cls, track, 0};
}

struct Rig {
  std::shared_ptr<PipelineShared> shared = std::make_shared<PipelineShared>();
  ParamValues params;
  PayloadDesc desc;
  std::unique_ptr<Stage> stage;
  StageContext ctx;
  std::vector<std::byte> picture = std::vector<std::byte>(image_bytes(PixelFormat::bgr8, kSourceWidth, kSourceHeight),
                                                          std::byte{200});  // a light grey source frame
  std::vector<FrameBoxes> boxes;  // detections: per frame of a process() call

  // `sized`: the classic kWidth x kHeight output; else the given parameters alone (the source's size).
  explicit Rig(Params given, PayloadDesc d = classes_desc(), bool sized = true) : desc(std::move(d)) {
    if (sized) {
      given.emplace("width", std::to_string(kWidth));
      given.emplace("height", std::to_string(kHeight));
    }
    params = params_of(annotate_stage(), given);
    shared->inputs.name_source(0, "cam");
    StageInit init{"annotate", params, desc};
    init.stage_names = {"decode", "infer", "annotate"};
    init.index = 2;
    init.shared = shared;
    stage = annotate_stage().make(init);
    shared->tap = stage->frame_tap();  // what the planner does (config/plan.cpp)
  }

  std::string health() const { return stage->health(); }

  // The source's side: its frames go into the tap (all but those in `skip`).
  // `pts_ns`: the frames' stamps (default: 40 ms apart).
  std::vector<FrameMeta> decode(std::uint32_t input, std::uint64_t first_sequence, int n, std::set<int> skip = {},
                                std::vector<std::int64_t> pts_ns = {}) {
    std::vector<FrameMeta> frames;
    for (int i = 0; i < n; ++i) {
      FrameMeta f;
      f.sequence = first_sequence + static_cast<std::uint64_t>(i);
      f.input = input;
      f.input_frame = static_cast<std::uint64_t>(i);
      f.pts_ns = static_cast<std::size_t>(i) < pts_ns.size() ? pts_ns[static_cast<std::size_t>(i)]
                                                              : std::int64_t{40'000'000} * i;
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
    b.desc.batch = std::max(desc.batch, b.count);  // one batch however many frames
    b.memory = Memory(MemoryKind::host, b.desc.batch_bytes());
    b.frames = frames;
    for (int i = 0; i < b.count; ++i) {
      if (desc.kind == PayloadKind::detections) {
        const FrameBoxes fb = static_cast<std::size_t>(i) < boxes.size() ? boxes[static_cast<std::size_t>(i)]
                                                                          : FrameBoxes{};
        const auto n = std::min<std::size_t>(fb.boxes.size(), static_cast<std::size_t>(desc.channels));
        const kernels::DetectionsHeader h{fb.count >= 0 ? fb.count : static_cast<std::int32_t>(n), 0, 0, 0};
        std::memcpy(b.item(i), &h, sizeof h);
        if (n) std::memcpy(b.item(i) + sizeof h, fb.boxes.data(), n * sizeof(kernels::Detection));
        continue;
      }
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

// A video read back with libavformat/libavcodec: its codec, every frame as BGR with its time stamp, the
// container's duration.
struct ReadBack {
  std::string codec;
  std::vector<cv::Mat> frames;
  std::vector<double> pts_s;
  double duration_s = 0;
};

ReadBack read_video(const fs::path& path) {
  ReadBack r;
  AVFormatContext* fmt = nullptr;
  REQUIRE(avformat_open_input(&fmt, path.c_str(), nullptr, nullptr) == 0);
  REQUIRE(avformat_find_stream_info(fmt, nullptr) >= 0);
  const int index = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  REQUIRE(index >= 0);
  AVStream* st = fmt->streams[index];
  r.codec = avcodec_get_name(st->codecpar->codec_id);
  if (fmt->duration > 0) r.duration_s = static_cast<double>(fmt->duration) / AV_TIME_BASE;
  const AVCodec* dec = avcodec_find_decoder(st->codecpar->codec_id);
  REQUIRE(dec);
  AVCodecContext* ctx = avcodec_alloc_context3(dec);
  REQUIRE(avcodec_parameters_to_context(ctx, st->codecpar) >= 0);
  REQUIRE(avcodec_open2(ctx, dec, nullptr) == 0);
  AVPacket* pkt = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  auto receive = [&] {
    while (avcodec_receive_frame(ctx, frame) == 0) {
      cv::Mat bgr(frame->height, frame->width, CV_8UC3);
      SwsContext* sws = sws_getContext(frame->width, frame->height, static_cast<AVPixelFormat>(frame->format),
                                       frame->width, frame->height, AV_PIX_FMT_BGR24, SWS_POINT, nullptr, nullptr,
                                       nullptr);
      uint8_t* dst[1] = {bgr.data};
      const int stride[1] = {static_cast<int>(bgr.step)};
      sws_scale(sws, frame->data, frame->linesize, 0, frame->height, dst, stride);
      sws_freeContext(sws);
      r.frames.push_back(bgr);
      r.pts_s.push_back(static_cast<double>(frame->best_effort_timestamp) * av_q2d(st->time_base));
    }
  };
  while (av_read_frame(fmt, pkt) >= 0) {
    if (pkt->stream_index == index) {
      avcodec_send_packet(ctx, pkt);
      receive();
    }
    av_packet_unref(pkt);
  }
  avcodec_send_packet(ctx, nullptr);
  receive();
  av_frame_free(&frame);
  av_packet_free(&pkt);
  avcodec_free_context(&ctx);
  avformat_close_input(&fmt);
  return r;
}

bool have_h264_encoder() { return avcodec_find_encoder_by_name("libx264") != nullptr; }

cv::Vec3b pixel(const cv::Mat& image, int x, int y) { return image.at<cv::Vec3b>(y, x); }
int distance(cv::Vec3b a, cv::Vec3b b) {
  return std::abs(a[0] - b[0]) + std::abs(a[1] - b[1]) + std::abs(a[2] - b[2]);
}
const cv::Vec3b kGrey(200, 200, 200);

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
  for (const std::string container : {"avi", "mp4", "mkv"}) {
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
    const ReadBack back = read_video(video);
    REQUIRE(back.frames.size() == 7);
    CHECK(back.frames[0].size() == cv::Size(kWidth, kHeight));
    if (have_h264_encoder()) CHECK(back.codec == "h264");
    check_drawn(back.frames[0]);
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

TEST_CASE("annotate takes classes or detections and registers itself", "[annotate]") {
  PayloadDesc frames;
  frames.kind = PayloadKind::frames;
  ParamValues params = params_of(annotate_stage(), {{"path", "/tmp/x"}});
  StageInit init{"annotate", params, frames};
  init.shared = std::make_shared<PipelineShared>();
  CHECK_THROWS_AS(annotate_stage().make(init), ConfigError);
  const StageInfo* info = StageRegistry::builtin().find("annotate");
  REQUIRE(info);
  CHECK(info->role == StageRole::sink);
  CHECK_THAT(describe_stage(*info), Contains("tap_frames") && Contains("container") && Contains("image_format"));
  // Parameters that do not go together.
  for (const Params& bad : std::vector<Params>{{{"path", "/tmp/x"}, {"width", "64"}},
                                                {{"path", "/tmp/x"}, {"format", "images"}, {"codec", "h264"}},
                                                {{"path", "/tmp/x"}, {"image_format", "png"}}}) {
    ParamValues p = params_of(annotate_stage(), bad);
    StageInit bad_init{"annotate", p, detections_desc()};
    bad_init.shared = std::make_shared<PipelineShared>();
    CHECK_THROWS_AS(annotate_stage().make(bad_init), ConfigError);
  }
}

TEST_CASE("annotate draws detection boxes at the source's size, one stable colour per track", "[annotate]") {
  const fs::path dir = fresh_dir("boxes");
  Rig rig({{"path", dir.string()}, {"format", "images"}, {"image_format", "png"}}, detections_desc(), false);
  rig.stage->open(rig.ctx);
  const std::uint32_t a = rig.begin_input("/videos/road.mp4", 3);
  const auto frames = rig.decode(a, 0, 3);
  // Track 5 moves right by 10 pixels a frame; track 9 stands still; an untracked car is on frame 2.
  rig.boxes = {{{box(20, 40, 80, 100, 5), box(112, 60, 150, 110, 9, 1)}},
               {{box(30, 40, 90, 100, 5), box(112, 60, 150, 110, 9, 1)}},
               {{box(40, 40, 100, 100, 5), box(112, 60, 150, 110, 9, 1), box(4, 10, 14, 20, -1, 1)}}};
  rig.process(frames);
  REQUIRE(rig.finish(frames) == std::vector<std::string>{(dir / "road").string()});
  std::vector<cv::Vec3b> colour5, colour9;
  for (int i = 0; i < 3; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "%06d.png", i);
    INFO(name);
    const cv::Mat image = cv::imread((dir / "road" / name).string());
    REQUIRE(image.size() == cv::Size(kSourceWidth, kSourceHeight));  // the source's size: none was configured
    const int left = 20 + 10 * i;
    // Box edges in the box's colour, its inside and the picture around untouched.
    const cv::Vec3b edge5 = pixel(image, left, 80), right5 = pixel(image, left + 59, 80), bottom5 = pixel(image, left + 30, 99);
    CHECK(distance(edge5, kGrey) > 60);
    CHECK(edge5 == right5);
    CHECK(edge5 == bottom5);
    CHECK(pixel(image, left + 30, 70) == kGrey);
    CHECK(pixel(image, left - 3, 80) == kGrey);
    const cv::Vec3b edge9 = pixel(image, 112, 90);
    CHECK(distance(edge9, kGrey) > 60);
    CHECK(pixel(image, 130, 90) == kGrey);
    colour5.push_back(edge5);
    colour9.push_back(edge9);
    // The tag above the box: filled in the box's colour at its top left, a little above the box.
    CHECK(pixel(image, left - 1, 38) == edge5);
  }
  CHECK(colour5[1] == colour5[0]);
  CHECK(colour5[2] == colour5[0]);
  CHECK(colour9[1] == colour9[0]);
  CHECK(colour9[2] == colour9[0]);
  CHECK(colour5[0] != colour9[0]);
  rig.stage->close(rig.ctx);
  fs::remove_all(dir);
}

TEST_CASE("annotate scales boxes to a configured size", "[annotate]") {
  const fs::path dir = fresh_dir("scaled_boxes");
  Rig rig({{"path", dir.string()}, {"format", "images"}, {"image_format", "png"}, {"width", "80"}, {"height", "60"}},
          detections_desc(), false);
  rig.stage->open(rig.ctx);
  const std::uint32_t a = rig.begin_input("/videos/half.mp4", 1);
  const auto frames = rig.decode(a, 0, 1);
  rig.boxes = {{{box(40, 40, 120, 100, 3)}}};  // source pixels: at 80x60 it is 20,20 .. 60,50
  rig.process(frames);
  rig.finish(frames);
  const cv::Mat image = cv::imread((dir / "half" / "000000.png").string());
  REQUIRE(image.size() == cv::Size(80, 60));
  CHECK(distance(pixel(image, 20, 35), kGrey) > 60);
  CHECK(distance(pixel(image, 59, 35), kGrey) > 60);
  CHECK(pixel(image, 40, 35) == kGrey);
  CHECK(pixel(image, 70, 35) == kGrey);
  rig.stage->close(rig.ctx);
  fs::remove_all(dir);
}

TEST_CASE("annotate writes video at the source's size with the frames' own time stamps", "[annotate]") {
  const fs::path dir = fresh_dir("timing");
  Rig rig({{"path", dir.string()}, {"fps", "5"}}, detections_desc(), false);
  rig.stage->open(rig.ctx);
  const std::uint32_t a = rig.begin_input("/videos/vfr.mp4", 6);
  // Variable rate: 40 ms apart, then a 160 ms gap, then 40 ms again; the stream starts at 2 s.
  const std::vector<std::int64_t> pts{2'000'000'000, 2'040'000'000, 2'080'000'000, 2'240'000'000, 2'280'000'000,
                                      2'320'000'000};
  const auto frames = rig.decode(a, 0, 6, {}, pts);
  rig.boxes.assign(6, FrameBoxes{{box(20, 20, 60, 60, 1)}});
  rig.process(frames);
  REQUIRE(rig.finish(frames) == std::vector<std::string>{(dir / "vfr.mp4").string()});
  rig.stage->close(rig.ctx);
  const ReadBack back = read_video(dir / "vfr.mp4");
  if (have_h264_encoder()) CHECK(back.codec == "h264");
  else CHECK(back.codec == "mpeg4");
  REQUIRE(back.frames.size() == 6);
  CHECK(back.frames[0].size() == cv::Size(kSourceWidth, kSourceHeight));
  for (std::size_t i = 0; i < pts.size(); ++i) {
    INFO("frame " << i);
    CHECK(back.pts_s[i] - back.pts_s[0] == Approx((pts[i] - pts[0]) / 1e9).margin(0.002));
  }
  CHECK(back.duration_s == Approx(0.36).margin(0.01));  // the last frame lasts as long as the one before
  // The box survives the encoder: its edge differs from the grey inside.
  CHECK(distance(pixel(back.frames[3], 20, 40), kGrey) > 40);
  CHECK(distance(pixel(back.frames[3], 40, 40), kGrey) < 20);
  fs::remove_all(dir);
}

TEST_CASE("annotate survives hostile detections and empty frames", "[annotate]") {
  const fs::path dir = fresh_dir("hostile");
  PayloadDesc d = detections_desc(8);
  d.labels = std::make_shared<const std::vector<std::string>>(
      std::vector<std::string>{std::string(100000, 'x'), "caf\xc3\xa9\n\x01", ""});
  Rig rig({{"path", dir.string()}, {"format", "images"}, {"image_format", "png"}}, d, false);
  rig.stage->open(rig.ctx);
  const std::uint32_t a = rig.begin_input("/videos/bad.mp4", 4);
  const auto frames = rig.decode(a, 0, 4, {3});
  // A zero-size frame from the source: not kept, drawn as missing.
  rig.shared->tap->put(frames[3], FrameTarget{nullptr, 0, 0, PixelFormat::bgr8});
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  rig.boxes = {
      {{box(nan, 0, 10, 10), box(0, -inf, 10, inf), box(-1e30f, -1e30f, 1e30f, 1e30f, 2, 0, nan),
        box(-50, -50, -10, -10), box(500, 500, 900, 900), box(150, 110, 90, 60, 2147483647, 1, inf),
        box(0, 0, 0, 0, 1, 2)}},
      {{box(10, 10, 50, 50, -5, -7), box(10, 10, 50, 50, 3, 999999)}, 1'000'000},  // count beyond the payload
      {{box(10, 10, 50, 50, 1, 0)}, -3},
      {},
  };
  rig.process(frames);
  REQUIRE(rig.finish(frames) == std::vector<std::string>{(dir / "bad").string()});
  const cv::Mat first = cv::imread((dir / "bad" / "000000.png").string());
  REQUIRE(first.size() == cv::Size(kSourceWidth, kSourceHeight));
  // The box from 1e30 is clipped to the frame: its edge runs along the frame's border.
  CHECK(distance(pixel(first, 0, kSourceHeight / 2), kGrey) > 60);
  rig.stage->close(rig.ctx);
  fs::remove_all(dir);

  // A zero-size frame put into a tap that takes its size from the first frame is not kept.
  ScaledFrameTap tap(0, 0, 4, 1 << 20);
  FrameMeta m;
  std::vector<std::byte> none;
  tap.put(m, FrameTarget{none.data(), 0, 0, PixelFormat::bgr8});
  CHECK(tap.width() == 0);
  CHECK(tap.size() == 0);
  std::vector<std::byte> big(image_bytes(PixelFormat::bgr8, 640, 480), std::byte{1});
  m.sequence = 1;
  tap.put(m, FrameTarget{big.data(), 640, 480, PixelFormat::bgr8});
  CHECK(tap.width() == 640);
  CHECK(tap.capacity() == 1);  // 1 MiB holds one 640x480 frame
}

TEST_CASE("annotate copies a file input's audio alongside the frames", "[annotate]") {
  const fs::path dir = fresh_dir("audio");
  fs::create_directories(dir / "in");
  const fs::path input = dir / "in" / "talk.mp4";
  const std::string make = "ffmpeg -v error -y -f lavfi -i testsrc=size=160x120:rate=25 -f lavfi -i "
                           "sine=frequency=440:sample_rate=48000 -t 2 -c:v mpeg4 -c:a aac -shortest '" +
                           input.string() + "'";
  if (std::system(make.c_str()) != 0) {
    WARN("ffmpeg could not make an input with audio: skipped");
    return;
  }
  for (const bool audio : {true, false}) {
    INFO("audio " << audio);
    const fs::path out = dir / (audio ? "with" : "without");
    Rig rig({{"path", out.string()}, {"audio", audio ? "true" : "false"}}, detections_desc(), false);
    rig.stage->open(rig.ctx);
    const std::uint32_t a = rig.begin_input(input.string(), 25);
    std::vector<std::int64_t> pts;
    for (int i = 0; i < 25; ++i) pts.push_back(std::int64_t{400'000'000} + i * std::int64_t{40'000'000});
    const auto frames = rig.decode(a, 0, 25, {}, pts);  // 0.4 s to 1.4 s of the input
    rig.process(frames);
    REQUIRE(rig.finish(frames) == std::vector<std::string>{(out / "talk.mp4").string()});
    rig.stage->close(rig.ctx);
    AVFormatContext* fmt = nullptr;
    REQUIRE(avformat_open_input(&fmt, (out / "talk.mp4").c_str(), nullptr, nullptr) == 0);
    REQUIRE(avformat_find_stream_info(fmt, nullptr) >= 0);
    const int index = av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, nullptr, 0);
    if (audio) {
      REQUIRE(index >= 0);
      const AVStream* st = fmt->streams[index];
      CHECK(st->codecpar->codec_id == AV_CODEC_ID_AAC);
      REQUIRE(st->duration > 0);
      CHECK(static_cast<double>(st->duration) * av_q2d(st->time_base) == Approx(1.0).margin(0.05));
      CHECK(static_cast<double>(st->start_time) * av_q2d(st->time_base) == Approx(0).margin(0.03));
    } else {
      CHECK(index < 0);
    }
    avformat_close_input(&fmt);
    CHECK(read_video(out / "talk.mp4").frames.size() == 25);
  }
  fs::remove_all(dir);
}

TEST_CASE("the planner wires the tap of every annotate sink to the source (several: one fan-out)", "[annotate]") {
  const fs::path a = fresh_dir("tap_wire_a"), b = fresh_dir("tap_wire_b");
  const std::string model = std::string(SLUICE_SOURCE_DIR) + "/models/testsrc-classifier.onnx";
  const std::string head =
      "name: t\ndevice: cpu\nbatch_size: 4\nstages:\n"
      "  - kind: decode\n    source: testsrc\n    width: 160\n    height: 120\n    frames: 4\n"
      "  - kind: upload\n  - kind: preprocess\n    width: 64\n    height: 64\n"
      "  - kind: infer\n    model: " + model + "\n    output: classes\n    top_k: 1\n  - kind: download\n";
  const auto annotate = [](const fs::path& dir, const std::string& indent) {
    const std::string keys(indent.size(), ' ');  // the item's other keys line up with its first
    return indent + "kind: annotate\n" + keys + "path: " + dir.string() + "\n" + keys + "format: images\n";
  };
  const auto taps_of = [](const PipelinePlan& plan) {
    std::vector<const ScaledFrameTap*> taps;
    for (const auto& ps : plan.stages)
      if (auto tap = ps.stage->frame_tap()) taps.push_back(dynamic_cast<const ScaledFrameTap*>(tap.get()));
    return taps;
  };
  SECTION("one sink: its tap") {
    const PipelinePlan plan = plan_pipeline(parse_pipeline(head + annotate(a, "  - "), "t.yaml"));
    const auto taps = taps_of(plan);
    REQUIRE(taps.size() == 1);
    CHECK(plan.shared->tap.get() == taps.front());
  }
  SECTION("two sinks behind a tee: every frame reaches both") {
    const std::string yaml = head + "  - kind: tee\n    branches:\n" + annotate(a, "      - - ") +
                             "          name: drawn_a\n" + annotate(b, "      - - ") + "          name: drawn_b\n";
    const PipelinePlan plan = plan_pipeline(parse_pipeline(yaml, "t.yaml"));
    const auto taps = taps_of(plan);
    REQUIRE(taps.size() == 2);
    REQUIRE(plan.shared->tap);
    std::vector<std::byte> picture(160 * 120 * 3, std::byte{50});
    FrameMeta f;
    f.sequence = 3;
    plan.shared->tap->put(f, FrameTarget{picture.data(), 160, 120, PixelFormat::bgr8});
    for (const ScaledFrameTap* tap : taps) {
      REQUIRE(tap);
      CHECK(tap->size() == 1);
    }
  }
}
