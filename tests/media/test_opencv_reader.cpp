// The OpenCV readers over real inputs made by tests/media/make_inputs.sh (the CTest fixture media_inputs):
// frame counts against the manifest, pixel formats against independent conversions, resizing, broken files,
// image sequences, a batch-job directory, cameras that are not there, and a TCP stream served by ffmpeg that
// is cut, stalled and served again.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/videoio.hpp>
#include <string>
#include <thread>
#include <vector>

#include "byte_diff.hpp"
#include "kernels/preprocess_cpu.hpp"
#include "media/file_checks.hpp"
#include "media/media.hpp"
#include "media/nvdec/annexb_reader.hpp"
#if SLUICE_WITH_CUDA
#include "media/nvdec/nvdec_decoder.hpp"
#endif
#include "media/opencv_reader.hpp"
#include "runtime/inputs.hpp"
#include "runtime/source_kind.hpp"

extern char** environ;

using namespace sluice;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kInputs = SLUICE_BINARY_DIR "/media-inputs";

std::string input(const std::string& name) { return kInputs + "/" + name; }

const nlohmann::json& manifest() {
  static const nlohmann::json m = [] {
    std::ifstream in(input("manifest.json"));
    if (!in)
      FAIL("no " << input("manifest.json") << ": run tests/media/make_inputs.sh " << kInputs
                 << " (the CTest fixture media_inputs does)");
    return nlohmann::json::parse(in);
  }();
  return m;
}

InputKind kind_named(const std::string& s) {
  if (s == "image") return InputKind::image;
  if (s == "image_sequence") return InputKind::image_sequence;
  return InputKind::file;
}

std::unique_ptr<FrameReader> open_input(const std::string& uri, const ReaderOptions& o = {}) {
  return ReaderRegistry::global().open(classify_uri(uri), uri, o);
}

// A target with its own memory.
struct Frame {
  std::vector<std::uint8_t> bytes;
  FrameTarget target;
  Frame(int w, int h, PixelFormat p) : bytes(image_bytes(p, w, h), 0xcd) {
    target = {reinterpret_cast<std::byte*>(bytes.data()), w, h, p};
  }
};

struct ReadAll {
  std::int64_t frames = 0;
  ReadStatus last = ReadStatus::frame;
  std::string why;
};

ReadAll read_all(FrameReader& r, const FrameTarget& t, std::int64_t cap = 100000) {
  ReadAll out;
  while (out.frames < cap && (out.last = r.read(t, out.why)) == ReadStatus::frame) ++out.frames;
  return out;
}

// Frame `n` (0-based) of a video as FFmpeg decodes it, through OpenCV directly (the reference).
cv::Mat reference_frame(const std::string& path, int n) {
  cv::VideoCapture cap(path, cv::CAP_FFMPEG);
  REQUIRE(cap.isOpened());
  cv::Mat m;
  for (int i = 0; i <= n; ++i) REQUIRE(cap.read(m));
  return m.clone();
}

// Frame `n` of `uri` through a reader, into a target of the given shape.
Frame reader_frame(const std::string& uri, int n, int w, int h, PixelFormat p) {
  auto r = open_input(uri);
  Frame f(w, h, p);
  std::string why;
  for (int i = 0; i <= n; ++i) REQUIRE(r->read(f.target, why) == ReadStatus::frame);
  return f;
}

std::uint8_t clamp_u8(int v) { return static_cast<std::uint8_t>(std::clamp(v, 0, 255)); }
// testsrc's BT.601 limited range (stages/testsrc.cpp), from R, G, B.
std::uint8_t luma(int r, int g, int b) { return clamp_u8(((66 * r + 129 * g + 25 * b + 128) >> 8) + 16); }
std::uint8_t chroma_u(int r, int g, int b) { return clamp_u8(((-38 * r - 74 * g + 112 * b + 128) >> 8) + 128); }
std::uint8_t chroma_v(int r, int g, int b) { return clamp_u8(((112 * r - 94 * g - 18 * b + 128) >> 8) + 128); }

using Diff = test::ByteDiff;

// Checks a frame of `pixel` against the BGR reference `bgr` (same size), by the formulas stated in
// media/opencv_reader.hpp.
void check_against_bgr(const Frame& f, const cv::Mat& bgr) {
  const int w = f.target.width, h = f.target.height;
  REQUIRE(bgr.cols == w);
  REQUIRE(bgr.rows == h);
  const std::uint8_t* out = f.bytes.data();
  const std::size_t plane = static_cast<std::size_t>(w) * static_cast<std::size_t>(h);
  Diff dy, du, dv;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const auto* p = bgr.ptr<std::uint8_t>(y) + 3 * x;
      const int b = p[0], g = p[1], r = p[2];
      const std::size_t i = static_cast<std::size_t>(y) * static_cast<std::size_t>(w) + static_cast<std::size_t>(x);
      switch (f.target.pixel) {
        case PixelFormat::bgr8:
          for (int c = 0; c < 3; ++c) dy.add(out[3 * i + c], p[c]);
          break;
        case PixelFormat::rgb8:
          for (int c = 0; c < 3; ++c) dy.add(out[3 * i + c], p[2 - c]);
          break;
        case PixelFormat::gray8: dy.add(out[i], clamp_u8((77 * r + 150 * g + 29 * b + 128) >> 8)); break;
        case PixelFormat::nv12:
        case PixelFormat::i420: {
          dy.add(out[i], luma(r, g, b));
          if (x % 2 || y % 2) break;
          const std::size_t ci = static_cast<std::size_t>(y / 2) * static_cast<std::size_t>(w / 2) +
                                 static_cast<std::size_t>(x / 2);
          const std::uint8_t u = f.target.pixel == PixelFormat::nv12 ? out[plane + 2 * ci] : out[plane + ci];
          const std::uint8_t v = f.target.pixel == PixelFormat::nv12 ? out[plane + 2 * ci + 1] : out[plane + plane / 4 + ci];
          du.add(u, chroma_u(r, g, b));
          dv.add(v, chroma_v(r, g, b));
          break;
        }
      }
    }
  INFO(to_string(f.target.pixel) << " " << w << "x" << h << ": luma/bytes max " << dy.max << " mean " << dy.mean
                                 << ", u max " << du.max << ", v max " << dv.max);
  const bool exact = f.target.pixel == PixelFormat::bgr8 || f.target.pixel == PixelFormat::rgb8;
  CHECK(dy.max <= (exact ? 0 : 1));
  CHECK(du.max <= 1);
  CHECK(dv.max <= 1);
}

constexpr PixelFormat kFormats[] = {PixelFormat::bgr8, PixelFormat::rgb8, PixelFormat::gray8, PixelFormat::nv12,
                                    PixelFormat::i420};

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// `ffmpeg -re -stream_loop -1 -i CLIP -c copy -f mpegts tcp://127.0.0.1:PORT?listen=1` as a child process.
struct StreamServer {
  pid_t pid = -1;
  StreamServer(const std::string& clip, int port) {
    const std::string url = "tcp://127.0.0.1:" + std::to_string(port) + "?listen=1";
    std::vector<std::string> args{"ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "fatal", "-re", "-stream_loop",
                                  "-1",     "-i",           clip,        "-c",       "copy",  "-f",  "mpegts", url};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    const int rc = posix_spawnp(&pid, "ffmpeg", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE(rc == 0);
  }
  void signal(int sig) const { ::kill(pid, sig); }
  void stop() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~StreamServer() { stop(); }
};

// Opens the stream once the server listens (a refused connection fails at once; retried for up to 20 s).
std::unique_ptr<FrameReader> open_stream_when_up(const std::string& url, const ReaderOptions& o) {
  const auto give_up = Clock::now() + std::chrono::seconds(20);
  for (;;) {
    try {
      return ReaderRegistry::global().open(InputKind::stream, url, o);
    } catch (const InputError& e) {
      if (Clock::now() > give_up) FAIL("stream never came up: " << e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace

TEST_CASE("the media library registers a reader for every media input kind", "[media][reader]") {
  // Linked in, it registers itself (SLUICE_REGISTER_READERS): nothing is called.
  for (InputKind k : {InputKind::file, InputKind::image, InputKind::image_sequence, InputKind::camera,
                      InputKind::stream}) {
    INFO(to_string(k));
    CHECK(ReaderRegistry::global().has(k));
  }
}

TEST_CASE("every good input reads the frame count of the manifest", "[media][reader]") {
  for (const auto& [name, entry] : manifest()["good"].items()) {
    INFO(name);
    const std::string uri = input(name);
    REQUIRE(classify_uri(uri) == kind_named(entry["kind"]));
    auto r = open_input(uri);
    const InputInfo& info = r->info();
    CHECK(info.uri == uri);
    CHECK(info.kind == kind_named(entry["kind"]));
    // Only a count the container states (MP4's sample table); AVI and Matroska state none: -1.
    CHECK(info.frames_total == entry.value("frames_stated", entry["frames"].get<std::int64_t>()));
    CHECK(info.width == entry["width"].get<int>());
    CHECK(info.height == entry["height"].get<int>());
    if (entry.contains("fps")) CHECK(info.fps == Approx(entry["fps"].get<double>()).epsilon(0.01));
    CHECK_FALSE(info.backend.empty());
    Frame f(64, 48, PixelFormat::bgr8);
    const ReadAll got = read_all(*r, f.target);
    CHECK(got.frames == entry["frames"].get<std::int64_t>());
    CHECK(got.last == ReadStatus::end);
    CHECK(got.why.empty());
    std::string why;
    CHECK(r->read(f.target, why) == ReadStatus::end);  // stays ended
  }
}

TEST_CASE("bgr8 at the native size is the frame FFmpeg decodes", "[media][reader]") {
  for (const char* name : {"clip.mp4", "clip.avi", "clip.mkv"}) {
    INFO(name);
    const cv::Mat ref = reference_frame(input(name), 3);
    const Frame f = reader_frame(input(name), 3, ref.cols, ref.rows, PixelFormat::bgr8);
    REQUIRE(std::memcmp(f.bytes.data(), ref.data, f.bytes.size()) == 0);
  }
  const cv::Mat png = cv::imread(input("image.png"), cv::IMREAD_COLOR);
  const Frame f = reader_frame(input("image.png"), 0, png.cols, png.rows, PixelFormat::bgr8);
  REQUIRE(std::memcmp(f.bytes.data(), png.data, f.bytes.size()) == 0);
}

// Images go through OpenCV's converter (videos through libswscale: test_libav_reader.cpp compares those with
// the ffmpeg tool's conversions).
TEST_CASE("every pixel format matches a conversion of the same BGR frame", "[media][reader]") {
  const std::string image = input("image.png");
  const cv::Mat ref = cv::imread(image, cv::IMREAD_COLOR);
  for (PixelFormat p : kFormats) {
    SECTION(std::string(to_string(p)) + " at the native size") {
      check_against_bgr(reader_frame(image, 0, ref.cols, ref.rows, p), ref);
    }
    SECTION(std::string(to_string(p)) + " shrunk to 160x120") {
      cv::Mat small;
      cv::resize(ref, small, cv::Size(160, 120), 0, 0, cv::INTER_AREA);
      check_against_bgr(reader_frame(image, 0, 160, 120, p), small);
    }
  }
}

TEST_CASE("nv12 and i420 output decodes back to the frame through the preprocess CPU twin", "[media][reader]") {
  const std::string clip = input("clip.mp4");
  const cv::Mat ref = reference_frame(clip, 7);
  for (PixelFormat p : {PixelFormat::nv12, PixelFormat::i420}) {
    INFO(to_string(p));
    const Frame f = reader_frame(clip, 7, ref.cols, ref.rows, p);
    kernels::PreprocessParams pp;
    pp.in_format = p;
    pp.in_width = pp.out_width = ref.cols;
    pp.in_height = pp.out_height = ref.rows;
    pp.out_order = kernels::ChannelOrder::bgr;
    pp.layout = Layout::nhwc;
    std::vector<float> back(static_cast<std::size_t>(ref.cols * ref.rows * 3));
    kernels::preprocess_cpu(pp, f.bytes.data(), back.data());
    // Luma survives exactly up to rounding; chroma is shared by 2x2 blocks, so edges of this busy pattern
    // differ locally: bound the mean.
    Diff d;
    for (std::size_t i = 0; i < back.size(); ++i)
      d.add(static_cast<int>(std::lround(back[i] * 255.f)), ref.data[i]);
    INFO("mean " << d.mean << " max " << d.max);
    CHECK(d.mean < 6.0);
  }
}

TEST_CASE("readers stretch to the target size", "[media][reader]") {
  const std::string clip = input("clip.mp4");
  const std::string image = input("image.png");
  const cv::Mat png = cv::imread(image, cv::IMREAD_COLOR);  // 200x150
  SECTION("images: shrinking uses INTER_AREA") {
    cv::Mat want;
    cv::resize(png, want, cv::Size(100, 40), 0, 0, cv::INTER_AREA);
    const Frame f = reader_frame(image, 0, 100, 40, PixelFormat::bgr8);
    REQUIRE(std::memcmp(f.bytes.data(), want.data, f.bytes.size()) == 0);
  }
  SECTION("images: growing uses INTER_LINEAR") {
    cv::Mat want;
    cv::resize(png, want, cv::Size(640, 360), 0, 0, cv::INTER_LINEAR);
    const Frame f = reader_frame(image, 0, 640, 360, PixelFormat::bgr8);
    REQUIRE(std::memcmp(f.bytes.data(), want.data, f.bytes.size()) == 0);
  }
  SECTION("videos are scaled too (libswscale, bicubic): close to OpenCV's area average of the same frame") {
    const cv::Mat ref = reference_frame(clip, 2);  // 320x240
    cv::Mat want;
    cv::resize(ref, want, cv::Size(100, 40), 0, 0, cv::INTER_AREA);
    const Frame f = reader_frame(clip, 2, 100, 40, PixelFormat::bgr8);
    Diff d;
    for (std::size_t i = 0; i < f.bytes.size(); ++i) d.add(f.bytes[i], want.data[i]);
    INFO("mean " << d.mean << " max " << d.max);
    CHECK(d.mean < 6.0);
  }
  SECTION("an image is stretched too") {
    const Frame f = reader_frame(input("image.jpg"), 0, 32, 32, PixelFormat::gray8);
    CHECK(f.bytes.size() == 32 * 32);
  }
  SECTION("odd sizes are refused for nv12 and i420") {
    auto r = open_input(clip);
    Frame f(33, 20, PixelFormat::nv12);
    std::string why;
    REQUIRE(r->read(f.target, why) == ReadStatus::error);
    CHECK_THAT(why, Catch::Contains("nv12 needs even width and height (got 33x20)"));
    FrameConverter c;
    const cv::Mat m(24, 32, CV_8UC3, cv::Scalar(1, 2, 3));
    CHECK_THROWS_AS(c.convert(m, f.target), std::invalid_argument);
  }
  SECTION("the target can change from frame to frame") {
    auto r = open_input(clip);
    std::string why;
    Frame a(320, 240, PixelFormat::bgr8), b(64, 64, PixelFormat::i420), c(320, 240, PixelFormat::bgr8);
    REQUIRE(r->read(a.target, why) == ReadStatus::frame);
    REQUIRE(r->read(b.target, why) == ReadStatus::frame);
    REQUIRE(r->read(c.target, why) == ReadStatus::frame);
    const cv::Mat third = reference_frame(clip, 2);
    REQUIRE(std::memcmp(c.bytes.data(), third.data, c.bytes.size()) == 0);
  }
}

TEST_CASE("images are letterboxed and cropped as fit says", "[media][reader][fit]") {
  const std::string image = input("image.png");
  const cv::Mat png = cv::imread(image, cv::IMREAD_COLOR);  // 200x150
  std::string why;
  SECTION("letterbox into a square: black bars above and below, the whole image between") {
    ReaderOptions o;
    o.fit = Fit::letterbox;
    auto r = open_input(image, o);
    Frame f(100, 100, PixelFormat::bgr8);
    REQUIRE(r->read(f.target, why) == ReadStatus::frame);
    cv::Mat want(100, 100, CV_8UC3, cv::Scalar::all(0));
    cv::resize(png, want(cv::Rect(0, 12, 100, 75)), cv::Size(100, 75), 0, 0, cv::INTER_AREA);  // 150/2 = 75 rows
    REQUIRE(std::memcmp(f.bytes.data(), want.data, f.bytes.size()) == 0);
  }
  SECTION("crop into a square: the middle 150x150, scaled") {
    ReaderOptions o;
    o.fit = Fit::crop;
    auto r = open_input(image, o);
    Frame f(100, 100, PixelFormat::bgr8);
    REQUIRE(r->read(f.target, why) == ReadStatus::frame);
    cv::Mat want;
    cv::resize(png(cv::Rect(25, 0, 150, 150)), want, cv::Size(100, 100), 0, 0, cv::INTER_AREA);
    REQUIRE(std::memcmp(f.bytes.data(), want.data, f.bytes.size()) == 0);
  }
  SECTION("letterbox in i420: even bars of limited-range black") {
    ReaderOptions o;
    o.fit = Fit::letterbox;
    auto r = open_input(image, o);
    Frame f(100, 100, PixelFormat::i420);
    REQUIRE(r->read(f.target, why) == ReadStatus::frame);
    for (int x = 0; x < 100; ++x) {
      CHECK(f.bytes[static_cast<std::size_t>(x)] == 16);             // first row: a bar
      CHECK(f.bytes[static_cast<std::size_t>(99 * 100 + x)] == 16);  // last row: a bar
    }
    CHECK(f.bytes[100 * 100] == 128);  // U of the first row: a bar
  }
}

TEST_CASE("a truncated file ends with an error that says so", "[media][reader]") {
  auto r = open_input(input("truncated.mp4"));
  const std::int64_t announced = manifest()["bad"]["truncated.mp4"]["frames_announced"];
  CHECK(r->info().frames_total == announced);
  Frame f(64, 48, PixelFormat::bgr8);
  const ReadAll got = read_all(*r, f.target);
  INFO(got.why);
  CHECK(got.frames > 0);
  CHECK(got.frames + truncation_tolerance(announced) < announced);
  CHECK(got.last == ReadStatus::error);
  CHECK_THAT(got.why, Catch::Contains("truncated") && Catch::Contains("of " + std::to_string(announced) + " frames"));
  std::string why;
  CHECK(r->read(f.target, why) == ReadStatus::end);  // one error, then the input is over
}

TEST_CASE("broken and missing files fail to open with a useful message", "[media][reader]") {
  struct Row {
    std::string name, says;
  };
  const Row rows[] = {
      {"corrupt.mp4", "not a video FFmpeg can decode (unsupported or corrupt)"},
      {"job/03_broken.mp4", "not a video FFmpeg can decode"},
      {"notes.txt", "not a video FFmpeg can decode"},
      {"empty.mp4", "empty file"},
      {"missing.mp4", "no such file"},
      {"missing.png", "no such file"},
      {"seq", "is a directory"},
  };
  for (const Row& r : rows) {
    INFO(r.name);
    const std::string uri = input(r.name);
    try {
      open_input(uri);
      FAIL("opened");
    } catch (const InputError& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains(r.says) && Catch::Contains(uri));
    }
  }
  // Random bytes named .png: no image header, never handed to imgcodecs.
  const std::string fake = (fs::temp_directory_path() / ("sluice-fake-" + std::to_string(::getpid()) + ".png")).string();
  fs::copy_file(input("corrupt.mp4"), fake, fs::copy_options::overwrite_existing);
  REQUIRE_THROWS_WITH(open_input(fake), Catch::Contains("not an image sluice reads"));
  fs::remove(fake);
}

TEST_CASE("an image sequence reads every image then ends", "[media][reader]") {
  auto r = open_input(input("seq/frame_%04d.png"));
  CHECK(r->info().kind == InputKind::image_sequence);
  CHECK(r->info().frames_total == 12);
  Frame f(160, 120, PixelFormat::rgb8);
  const ReadAll got = read_all(*r, f.target);
  CHECK(got.frames == 12);
  CHECK(got.last == ReadStatus::end);
  // The first image, through imgcodecs, is what the sequence gave first.
  auto again = open_input(input("seq/frame_%04d.png"));
  auto single = open_input(input("seq/frame_0001.png"));
  Frame a(160, 120, PixelFormat::bgr8), b(160, 120, PixelFormat::bgr8);
  std::string why;
  REQUIRE(again->read(a.target, why) == ReadStatus::frame);
  REQUIRE(single->read(b.target, why) == ReadStatus::frame);
  CHECK(a.bytes == b.bytes);
  REQUIRE_THROWS_WITH(open_input(input("seq/nothing_%03d.png")), Catch::Contains("no image of the sequence"));
}

// Issue 33: a FIFO among a sequence's files blocked the source forever (CAP_IMAGES opened it to count the
// sequence). The files are found with stat only now, and one that is not a regular file refuses the sequence.
TEST_CASE("an image sequence with a FIFO among its files is refused naming it, without blocking", "[media][reader]") {
  const fs::path dir = fs::temp_directory_path() / ("sluice-seq-fifo-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (int i = 1; i <= 3; ++i)
    fs::copy_file(input("seq/frame_000" + std::to_string(i) + ".png"), dir / ("f_" + std::to_string(i) + ".png"));
  // Numbered from 1 (no image 0), %d without a width, to the first missing number.
  auto r = open_input((dir / "f_%d.png").string());
  CHECK(r->info().frames_total == 3);
  Frame f(160, 120, PixelFormat::bgr8);
  CHECK(read_all(*r, f.target).frames == 3);
  fs::remove(dir / "f_2.png");
  REQUIRE(::mkfifo((dir / "f_2.png").c_str(), 0600) == 0);
  const auto start = Clock::now();
  CHECK_THROWS_WITH(open_input((dir / "f_%d.png").string()),
                    Catch::Contains((dir / "f_2.png").string()) && Catch::Contains("FIFO"));
  CHECK(Clock::now() - start < std::chrono::seconds(5));
  // A second conversion or another '%' is refused, not handed to printf.
  CHECK_THROWS_WITH(open_input((dir / "f_%d_%s.png").string()), Catch::Contains("exactly one number conversion"));
  fs::remove_all(dir);
}

TEST_CASE("a job directory expands to its files and the good ones read fully", "[media][reader]") {
  const auto& job = manifest()["job"];
  const ExpandedSource e = expand_source(input(job["dir"]));
  CHECK(e.job);
  REQUIRE(e.inputs.size() == job["inputs"].size());
  std::int64_t frames = 0;
  int failed = 0;
  for (std::size_t i = 0; i < e.inputs.size(); ++i) {
    const auto& [path, kind] = e.inputs[i];
    CHECK(path == input(job["inputs"][i]));
    try {
      auto r = ReaderRegistry::global().open(kind, path, {});
      Frame f(96, 64, PixelFormat::nv12);
      const ReadAll got = read_all(*r, f.target);
      CHECK(got.last == ReadStatus::end);
      frames += got.frames;
    } catch (const InputError& err) {
      ++failed;
      CHECK_THAT(std::string(err.what()), Catch::Contains("03_broken.mp4"));
    }
  }
  CHECK(failed == 1);
  CHECK(frames == job["good_frames"].get<std::int64_t>());
}

TEST_CASE("a camera that is not there fails to open clearly", "[media][reader]") {
  for (const char* uri : {"/dev/video9", "v4l2:63", "v4l2:/dev/video42"}) {
    INFO(uri);
    const std::string dev = "/dev/video" + std::to_string(camera_index(uri));
    if (fs::exists(dev)) {
      WARN(dev << " exists here; skipped");
      continue;
    }
    REQUIRE_THROWS_AS(ReaderRegistry::global().open(InputKind::camera, uri, {}), InputError);
    REQUIRE_THROWS_WITH(ReaderRegistry::global().open(InputKind::camera, uri, {}),
                        Catch::Contains("no such camera") && Catch::Contains(dev));
  }
  CHECK(camera_index("/dev/video3") == 3);
  CHECK(camera_index("v4l2:7") == 7);
  CHECK(camera_index("V4L2:/dev/video12") == 12);
  CHECK(camera_index("/dev/v4l/by-id/not-there") == -1);
  CHECK(camera_index("clip.mp4") == -1);
  ReaderOptions bad;
  bad.fourcc = "MJPEG";
  if (fs::exists("/dev/video0")) REQUIRE_THROWS_WITH(open_camera_reader("/dev/video0", bad), Catch::Contains("fourcc"));
}

TEST_CASE("a stream reads frames - fails when the server goes - and reads again when it is back", "[media][reader][stream]") {
  const std::string clip = input("clip.mp4");
  const int port = free_tcp_port();
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  ReaderOptions o;
  o.open_timeout_s = 5;
  o.read_timeout_s = 2;
  Frame f(160, 120, PixelFormat::nv12);
  std::string why;

  {
    StreamServer server(clip, port);
    auto r = open_stream_when_up(url, o);
    CHECK(r->info().kind == InputKind::stream);
    CHECK(r->info().frames_total == -1);
    CHECK(r->info().width == 320);
    CHECK(r->info().height == 240);
    CHECK(r->info().backend == "libavcodec h264");
    for (int i = 0; i < 10; ++i) REQUIRE(r->read(f.target, why) == ReadStatus::frame);

    server.stop();  // the server dies: what is buffered may still come, then an error
    const auto t0 = Clock::now();
    const ReadAll got = read_all(*r, f.target, 1000);
    INFO(got.why);
    CHECK(got.last == ReadStatus::error);
    CHECK_THAT(got.why, Catch::Contains("stream stopped"));
    CHECK(Clock::now() - t0 < std::chrono::seconds(15));  // a bound for hangs, not a timing test
  }

  SECTION("a stalled server runs into the read timeout") {
    StreamServer server(clip, port);
    auto r = open_stream_when_up(url, o);
    for (int i = 0; i < 5; ++i) REQUIRE(r->read(f.target, why) == ReadStatus::frame);
    server.signal(SIGSTOP);  // connected, silent
    const auto t0 = Clock::now();
    const ReadAll got = read_all(*r, f.target, 1000);
    INFO(got.why);
    CHECK(got.last == ReadStatus::error);
    CHECK(Clock::now() - t0 < std::chrono::seconds(15));
    server.signal(SIGCONT);
  }

  SECTION("a new reader reads again once the server is back") {
    StreamServer server(clip, port);
    auto r = open_stream_when_up(url, o);
    for (int i = 0; i < 10; ++i) REQUIRE(r->read(f.target, why) == ReadStatus::frame);
  }
}

TEST_CASE("a stream that is not there fails to open within the open timeout", "[media][reader][stream]") {
  ReaderOptions o;
  o.open_timeout_s = 1;
  const std::string url = "tcp://127.0.0.1:" + std::to_string(free_tcp_port());
  const auto t0 = Clock::now();
  REQUIRE_THROWS_WITH(ReaderRegistry::global().open(InputKind::stream, url, o), Catch::Contains("cannot open the stream"));
  CHECK(Clock::now() - t0 < std::chrono::seconds(15));
}

TEST_CASE("an Annex-B .h264 file is read on the CPU (OpenCV) when NVDEC cannot serve it", "[media][reader][annexb]") {
#if SLUICE_WITH_CUDA
  if (nvdec_unavailable_reason().empty()) return;  // NVDEC serves it here: the GPU tests cover that
#endif
  const std::string path = std::string(SLUICE_SOURCE_DIR) + "/tests/data/nvdec/h264_320x240.h264";
  for (const DecoderChoice choice : {DecoderChoice::automatic, DecoderChoice::cpu}) {
    INFO(to_string(choice));
    ReaderOptions options;
    options.decoder = choice;
    auto r = open_input(path, options);
    CHECK(r->info().backend.find("NVDEC") == std::string::npos);
    Frame f(320, 240, PixelFormat::bgr8);
    const ReadAll got = read_all(*r, f.target);
    CHECK(got.frames == 30);
    CHECK(got.last == ReadStatus::end);
  }
  ReaderOptions gpu_only;
  gpu_only.decoder = DecoderChoice::gpu;
  CHECK_THROWS_WITH(open_input(path, gpu_only), Catch::Contains("NVDEC unavailable: "));
}
