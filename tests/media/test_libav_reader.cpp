// The FFmpeg-based demux layer and video reader against the ffmpeg and ffprobe command-line tools run on the
// same inputs (made by tests/media/make_inputs.sh): the Annex-B byte stream of h264/hevc_mp4toannexb, the
// timestamps of a variable-frame-rate file, auto-rotation, pixel formats at the native size; the fit modes
// against a CPU-computed expectation; and damaged inputs (every prefix of a clip, bytes flipped) that must end
// with a reason, never a crash.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

extern "C" {
#include <libavcodec/codec_par.h>
}

#include "byte_diff.hpp"
#include "media/demux.hpp"
#include "media/frame_fit.hpp"
#include "media/libav_reader.hpp"
#include "runtime/inputs.hpp"
#include "runtime/source_kind.hpp"
#include "tests/temp_dir.hpp"

using namespace sluice;

namespace {

const std::string kInputs = SLUICE_BINARY_DIR "/media-inputs";
std::string input(const std::string& name) { return kInputs + "/" + name; }

// stdout of a shell command (ffmpeg/ffprobe on paths this test controls).
std::vector<std::uint8_t> run(const std::string& command) {
  FILE* p = ::popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  std::vector<std::uint8_t> out;
  std::uint8_t buf[65536];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.insert(out.end(), buf, buf + n);
  REQUIRE(::pclose(p) == 0);
  return out;
}
std::string run_text(const std::string& command) {
  const auto bytes = run(command);
  return {bytes.begin(), bytes.end()};
}

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Raw frames as the ffmpeg CLI decodes them (auto-rotation on), in an ffmpeg pixel format.
std::vector<std::uint8_t> ffmpeg_frames(const std::string& path, const std::string& pix_fmt, int frames) {
  return run("ffmpeg -hide_banner -nostdin -loglevel error -i '" + path + "' -frames:v " + std::to_string(frames) +
             " -f rawvideo -pix_fmt " + pix_fmt + " -");
}

struct Frame {
  std::vector<std::uint8_t> bytes;
  FrameTarget target;
  Frame(int w, int h, PixelFormat p) : bytes(image_bytes(p, w, h), 0xcd) {
    target = {reinterpret_cast<std::byte*>(bytes.data()), w, h, p};
  }
};

std::unique_ptr<FrameReader> open_video(const std::string& path, Fit fit = Fit::stretch) {
  ReaderOptions o;
  o.fit = fit;
  return ReaderRegistry::global().open(classify_uri(path), path, o);
}

using Diff = test::ByteDiff;
constexpr auto compare = test::compare_bytes;

}  // namespace

// A video read to its end (bgr8 at 64x48): how it ended, why, and each frame's pts (-1 where it had none).
struct ReadToEnd {
  ReadStatus status = ReadStatus::frame;
  std::string why;
  std::vector<std::int64_t> pts;
  int frames() const { return static_cast<int>(pts.size()); }
};
ReadToEnd read_to_end(FrameReader& r) {
  Frame f(64, 48, PixelFormat::bgr8);
  ReadToEnd out;
  while ((out.status = r.read(f.target, out.why)) == ReadStatus::frame) out.pts.push_back(r.pts_ns().value_or(-1));
  return out;
}
ReadToEnd read_to_end(const std::string& path) { return read_to_end(*open_video(path)); }

TEST_CASE("video files and streams are read through libavcodec", "[media][libav]") {
  auto r = open_video(input("clip.mp4"));
  CHECK(r->info().backend == "libavcodec h264");
  CHECK(r->info().frames_total == 48);
  CHECK(r->info().fps == Approx(24));
}

TEST_CASE("demux in Annex-B mode gives the byte stream of ffmpeg's mp4toannexb filter", "[media][libav][demux]") {
  test::TempDir tmp("sluice-annexb");
  struct Row {
    const char* file;
    const char* filter;
    const char* muxer;
    int codec;
  };
  for (const Row& row : {Row{"clip.mp4", "h264_mp4toannexb", "h264", AV_CODEC_ID_H264},
                         Row{"hevc.mp4", "hevc_mp4toannexb", "hevc", AV_CODEC_ID_HEVC}}) {
    INFO(row.file);
    const std::string want_path = tmp.str() + "/" + row.muxer;
    run("ffmpeg -hide_banner -nostdin -loglevel error -y -i '" + input(row.file) + "' -c copy -bsf:v " + row.filter +
        " -f " + row.muxer + " '" + want_path + "'");
    const std::vector<std::uint8_t> want = read_bytes(want_path);
    REQUIRE(want.size() > 100);

    DemuxOptions o;
    o.annex_b = true;
    Demuxer d(input(row.file), o);
    CHECK(d.codec_parameters().codec_id == row.codec);
    std::vector<std::uint8_t> got;
    DemuxPacket p;
    std::string why;
    int packets = 0;
    std::optional<std::int64_t> last_dts;
    while (d.read(p, why) == DemuxStatus::packet) {
      const auto bytes = p.data();
      REQUIRE(bytes.size() >= 4);
      CHECK((bytes[0] == 0 && bytes[1] == 0 && (bytes[2] == 1 || (bytes[2] == 0 && bytes[3] == 1))));  // start code
      got.insert(got.end(), bytes.begin(), bytes.end());
      REQUIRE(p.dts_ns);
      if (last_dts) CHECK(*p.dts_ns > *last_dts);  // decode order
      last_dts = p.dts_ns;
      ++packets;
    }
    CHECK(why.empty());
    CHECK(packets == 48 * (row.codec == AV_CODEC_ID_H264) + 12 * (row.codec == AV_CODEC_ID_HEVC));
    CHECK(got.size() == want.size());
    CHECK(got == want);
  }
}

TEST_CASE("demux without Annex-B gives the container's packets and timestamps", "[media][libav][demux]") {
  // ffprobe's packet list: pts and dts in the stream's time base, and the time base itself.
  const std::string probe = run_text("ffprobe -v error -select_streams v:0 -show_entries stream=time_base -show_entries "
                                     "packet=pts,dts,size -of csv=p=0 '" + input("clip.mp4") + "'");
  std::istringstream lines(probe);
  std::string line, time_base;
  std::vector<std::array<std::int64_t, 3>> want;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (line.find('/') != std::string::npos) {
      time_base = line;
      continue;
    }
    std::array<std::int64_t, 3> v{};
    REQUIRE(std::sscanf(line.c_str(), "%ld,%ld,%ld", &v[0], &v[1], &v[2]) == 3);
    want.push_back(v);
  }
  REQUIRE(want.size() == 48);
  Demuxer d(input("clip.mp4"), {});
  REQUIRE(time_base == std::to_string(d.time_base_num()) + "/" + std::to_string(d.time_base_den()));
  DemuxPacket p;
  std::string why;
  std::size_t i = 0;
  for (; d.read(p, why) == DemuxStatus::packet; ++i) {
    REQUIRE(i < want.size());
    const auto ns = [&](std::int64_t ts) {  // rounded to the nearest ns, as av_rescale_q does
      const std::int64_t den = d.time_base_den();
      return (ts * 1'000'000'000LL * d.time_base_num() + den / 2) / den;
    };
    INFO("packet " << i);
    CHECK(*p.pts_ns == ns(want[i][0]));
    CHECK(*p.dts_ns == ns(want[i][1]));
    CHECK(static_cast<std::int64_t>(p.data().size()) == want[i][2]);
  }
  CHECK(i == want.size());
  CHECK(d.read(p, why) == DemuxStatus::end);  // stays ended
}

TEST_CASE("a variable-frame-rate file keeps its timestamps and every frame", "[media][libav]") {
  const std::string path = input("vfr.mp4");
  const std::string probe = run_text("ffprobe -v error -select_streams v:0 -show_entries stream=time_base -show_entries "
                                     "frame=best_effort_timestamp -of csv=p=0 '" + path + "'");
  std::istringstream lines(probe);
  std::string line;
  int num = 0, den = 0;
  std::vector<std::int64_t> want;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (std::sscanf(line.c_str(), "%d/%d", &num, &den) == 2) continue;
    want.push_back(std::stoll(line));
  }
  REQUIRE(want.size() == 40);
  REQUIRE(den > 0);
  auto r = open_video(path);
  CHECK(r->info().frames_total == 40);
  const ReadToEnd read = read_to_end(*r);
  INFO(read.why);
  CHECK(read.status == ReadStatus::end);
  const std::vector<std::int64_t>& got = read.pts;
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("frame " << i);
    const double expected_ns = static_cast<double>(want[i]) * 1e9 * num / den;
    CHECK(std::abs(static_cast<double>(got[i]) - expected_ns) <= 1.0);
  }
  // The second half is slower: its frame spacing is 3x the first's (not one invented constant rate).
  CHECK(got[39] - got[38] > 2 * (got[1] - got[0]));

  // The same stream in Matroska (no frame index, ms timestamps): every frame, no "truncated", the same times
  // to the container's millisecond.
  const ReadToEnd mkv = read_to_end(input("vfr.mkv"));
  INFO(mkv.why);
  CHECK(mkv.status == ReadStatus::end);
  const std::vector<std::int64_t>& from_mkv = mkv.pts;
  REQUIRE(from_mkv.size() == got.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::abs(from_mkv[i] - got[i]) <= 1'000'000);
}

// The presentation times ffprobe gives every frame of `path`, in ns (best_effort_timestamp x the stream's time base,
// rounded as av_rescale_q does), in output order.
std::vector<std::int64_t> probe_frame_times(const std::string& path) {
  const std::string probe = run_text("ffprobe -v error -select_streams v:0 -show_entries stream=time_base -show_entries "
                                     "frame=best_effort_timestamp -of csv=p=0 '" + path + "'");
  std::istringstream lines(probe);
  std::string line;
  std::int64_t num = 0, den = 0;
  std::vector<std::int64_t> ts;
  while (std::getline(lines, line)) {
    while (!line.empty() && (line.back() == ',' || line.back() == '\r')) line.pop_back();
    if (line.empty()) continue;
    long long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%lld/%lld", &a, &b) == 2) {
      num = a;
      den = b;
      continue;
    }
    ts.push_back(std::stoll(line));
  }
  REQUIRE(den > 0);
  for (auto& t : ts) t = (t * 1'000'000'000LL * num + den / 2) / den;
  return ts;
}

TEST_CASE("a file with irregular frame drops is read whole, with the container's times, in every container",
          "[media][libav]") {
  // 72 of 150 frames kept (tests/media/make_inputs.sh drops/): the headers of all but MP4 say 30 fps over 4.9 s
  // (147 frames by duration x rate; AVI's header counts 147 chunks), and that is no reason to call them truncated.
  for (const char* name : {"drops.mkv", "drops.webm", "drops.ts", "drops.flv", "drops.avi", "drops.mp4"}) {
    const std::string path = input(std::string("drops/") + name);
    INFO(name);
    const std::vector<std::int64_t> want = probe_frame_times(path);
    CHECK(want.size() == 72);
    auto r = open_video(path);
    // Only MP4's sample table states the count; the others' would be an estimate.
    CHECK(r->info().frames_total == (std::string(name) == "drops.mp4" ? 72 : -1));
    const ReadToEnd read = read_to_end(*r);
    INFO(read.why);
    CHECK(read.status == ReadStatus::end);
    CHECK(read.why.empty());
    const std::vector<std::int64_t>& got = read.pts;
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("frame " << i);
      CHECK(got[i] == want[i]);
    }
  }
}

TEST_CASE("an MP4 whose edit list hides its first samples counts only the frames it shows", "[media][libav]") {
  // A stream copy cut between keyframes: 30 samples from the keyframe before the cut, the first 6 decoded only
  // as references. Its count is the 24 shown: not 30, which would call it 6 frames short.
  const std::string path = input("drops/editlist.mp4");
  const std::vector<std::int64_t> want = probe_frame_times(path);
  REQUIRE(want.size() == 24);
  auto r = open_video(path);
  CHECK(r->info().frames_total == 24);
  const ReadToEnd read = read_to_end(*r);
  INFO(read.why);
  CHECK(read.status == ReadStatus::end);
  CHECK(read.pts == want);
}

TEST_CASE("an MP4 with dropped frames cut short is still truncated", "[media][libav]") {
  // The sample table states 72 frames; the second half of the bytes is gone.
  test::TempDir dir("sluice-drops");
  const std::vector<std::uint8_t> whole = read_bytes(input("drops/drops.mp4"));
  const std::string cut = (dir.path / "cut.mp4").string();
  {
    std::ofstream out(cut, std::ios::binary);
    out.write(reinterpret_cast<const char*>(whole.data()), static_cast<std::streamsize>(whole.size() / 2));
  }
  auto r = open_video(cut);
  CHECK(r->info().frames_total == 72);
  const ReadToEnd got = read_to_end(*r);
  CHECK(got.status == ReadStatus::error);
  CHECK(got.frames() < 60);
  CHECK_THAT(got.why, Catch::Contains("ended after " + std::to_string(got.frames()) + " of 72 frames (truncated"));
}

// drops/NAME's first `keep` bytes, written into `dir`.
std::string cut_copy(const test::TempDir& dir, const std::string& name, std::size_t keep, const std::string& tag) {
  const std::vector<std::uint8_t> whole = read_bytes(input("drops/" + name));
  REQUIRE(keep < whole.size());
  const std::string cut = (dir.path / (tag + "_" + name)).string();
  std::ofstream out(cut, std::ios::binary);
  out.write(reinterpret_cast<const char*>(whole.data()), static_cast<std::streamsize>(keep));
  return cut;
}

// Where each video packet of drops/NAME starts (ffprobe's pkt_pos), in file order.
std::vector<std::size_t> packet_offsets(const std::string& name) {
  std::istringstream lines(run_text("ffprobe -v error -select_streams v:0 -show_entries packet=pos -of csv=p=0 '" +
                                    input("drops/" + name) + "'"));
  std::vector<std::size_t> offsets;
  for (std::string line; std::getline(lines, line);) {
    const std::string field = line.substr(0, line.find(','));  // MPEG-TS packets add an empty side-data column
    if (!field.empty() && field.find_first_not_of("0123456789") == std::string::npos)
      offsets.push_back(std::stoull(field));
  }
  std::sort(offsets.begin(), offsets.end());
  return offsets;
}


TEST_CASE("a file cut short fails with what its container shows, in every container", "[media][libav]") {
  // No count to compare against outside MP4 (drops/ holds variable-frame-rate files: see above); the demuxer and
  // the container's structure tell the cut: Matroska/WebM's demuxer logs "File ended prematurely"; AVI, FLV and
  // MP4 flag a last packet read short; AVI's RIFF size states more bytes than are left; an MPEG-TS file ends
  // inside a TS packet. drops.mp4 keeps its "ended after N of 72 frames".
  test::TempDir dir("sluice-cuts");
  const std::map<std::string, std::string> shows = {
      {"drops.mkv", "the Matroska demuxer reports 'File ended prematurely"},
      {"drops.webm", "the Matroska demuxer reports 'File ended prematurely"},
      {"drops.ts", "its last MPEG-TS packet is incomplete ("},
      {"drops.flv", "is incomplete: the FLV demuxer flagged it corrupt"},
      {"drops.avi", ""},  // a short last packet, or the RIFF size: where the cut falls
      {"drops.mp4", "of 72 frames (truncated or corrupt"},
  };
  for (const auto& [name, says] : shows) {
    const std::size_t size = read_bytes(input("drops/" + name)).size();
    const std::vector<std::size_t> offsets = packet_offsets(name);
    REQUIRE(offsets.size() == 72);
    // 30 %, 50 % and 90 % of the bytes, and inside the 41st packet (its first bytes only).
    std::vector<std::pair<std::string, std::size_t>> cuts = {
        {"30", size * 30 / 100}, {"50", size * 50 / 100}, {"90", size * 90 / 100}, {"pkt41", offsets[40] + 100}};
    for (const auto& [tag, keep] : cuts) {
      INFO(name << " cut at " << keep << " of " << size << " bytes (" << tag << ")");
      const ReadToEnd got = read_to_end(cut_copy(dir, name, keep, tag));
      INFO(got.why);
      CHECK(got.status == ReadStatus::error);
      CHECK(got.frames() < 72);
      if (name == "drops.mp4") {
        CHECK_THAT(got.why, Catch::Contains("ended after " + std::to_string(got.frames()) + " of 72 frames"));
      } else {
        CHECK_THAT(got.why, Catch::StartsWith("ended early after " + std::to_string(got.frames()) +
                                              " frames (truncated or corrupt): "));
        CHECK_THAT(got.why, Catch::Contains(says));
      }
      if (name == "drops.avi")
        CHECK_THAT(got.why, Catch::Contains("flagged it corrupt") || Catch::Contains("its RIFF chunk at byte 0 states"));
    }
  }
}

TEST_CASE("a cut between frames: Matroska, WebM and AVI still show it, MPEG-TS and FLV cannot", "[media][libav]") {
  test::TempDir dir("sluice-cuts");
  // Right before the 41st packet: no frame is cut in two, yet Matroska's cluster and segment sizes and AVI's RIFF
  // size state more bytes than are there.
  for (const char* name : {"drops.mkv", "drops.webm", "drops.avi"}) {
    INFO(name);
    const std::vector<std::size_t> offsets = packet_offsets(name);
    REQUIRE(offsets.size() == 72);
    const ReadToEnd got = read_to_end(cut_copy(dir, name, offsets[40], "between"));
    INFO(got.why);
    CHECK(got.status == ReadStatus::error);
    CHECK(got.frames() == 40);
    CHECK_THAT(got.why, Catch::StartsWith("ended early after 40 frames (truncated or corrupt): "));
  }
  // AVI: only the index (idx1, after every frame) lost: every frame is there, and the file still fails.
  {
    const std::vector<std::uint8_t> whole = read_bytes(input("drops/drops.avi"));
    const std::string idx1 = "idx1";
    const auto at = std::search(whole.begin(), whole.end(), idx1.begin(), idx1.end());
    REQUIRE(at != whole.end());
    const ReadToEnd got = read_to_end(cut_copy(dir, "drops.avi", static_cast<std::size_t>(at - whole.begin()) + 16, "idx1"));
    INFO(got.why);
    CHECK(got.status == ReadStatus::error);
    CHECK_THAT(got.why, Catch::Contains("its RIFF chunk at byte 0 states"));
  }
  // MPEG-TS holds no length, and FFmpeg leaves a video PES packet's unstated; FLV's tags state none past
  // themselves: a cut exactly between two frames (at a TS packet and a tag boundary) reads as a complete, shorter
  // file (docs/sources.md says so). This pins that limit, so a future FFmpeg that tells it shows here.
  for (const char* name : {"drops.ts", "drops.flv"}) {
    INFO(name);
    const std::vector<std::size_t> offsets = packet_offsets(name);
    const ReadToEnd got = read_to_end(cut_copy(dir, name, offsets[40], "between"));
    INFO(got.why);
    CHECK(got.status == ReadStatus::end);
    CHECK(got.frames() == 40);
  }
}

TEST_CASE("a whole file written to a pipe (its sizes unstated) is not taken for a cut one", "[media][libav]") {
  // A writer that cannot seek back leaves Matroska's segment size unknown and AVI's RIFF size 0xFFFFFFFF.
  test::TempDir dir("sluice-piped");
  for (const char* format : {"matroska", "webm", "avi", "flv", "mpegts"}) {
    INFO(format);
    const std::string path = (dir.path / (std::string("piped.") + format)).string();
    const std::string codec = std::string(format) == "webm" ? "-c:v libvpx-vp9 -deadline realtime -cpu-used 8"
                                                            : "-c:v libx264 -preset ultrafast -pix_fmt yuv420p";
    run("ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i testsrc2=size=160x120:rate=30 -frames:v 40 " +
        codec + " -f " + format + " - > '" + path + "'");
    const ReadToEnd got = read_to_end(path);
    INFO(got.why);
    CHECK(got.status == ReadStatus::end);
    CHECK(got.frames() == 40);
  }
}

TEST_CASE("rotated videos come out as ffmpeg auto-rotates them", "[media][libav]") {
  for (const char* name : {"rot90.mp4", "rot180.mp4", "rot270.mp4"}) {
    INFO(name);
    auto r = open_video(input(name));
    const bool sideways = std::string(name) != "rot180.mp4";
    const int w = sideways ? 96 : 160, h = sideways ? 160 : 96;
    CHECK(r->info().width == w);
    CHECK(r->info().height == h);
    const std::vector<std::uint8_t> want = ffmpeg_frames(input(name), "bgr24", 2);
    REQUIRE(want.size() == static_cast<std::size_t>(2 * w * h * 3));
    std::string why;
    for (int i = 0; i < 2; ++i) {
      Frame f(w, h, PixelFormat::bgr8);
      REQUIRE(r->read(f.target, why) == ReadStatus::frame);
      const Diff d = compare(f.bytes.data(), want.data() + static_cast<std::size_t>(i * w * h * 3), f.bytes.size());
      INFO("frame " << i << ": mean " << d.mean << " max " << d.max);
      // The same YUV, converted before (here) or after (ffmpeg) turning: equal up to rounding of the chroma
      // interpolation (a wrong turn differs by tens on average).
      CHECK(d.max <= 2);
    }
  }
}

TEST_CASE("every pixel format at the native size is what ffmpeg converts to", "[media][libav]") {
  const std::string clip = input("clip.mp4");  // 320x240
  struct Row {
    PixelFormat pixel;
    const char* ffmpeg;
    int tolerance;
  };
  // The same libswscale with the same (bicubic) flags: byte for byte.
  for (const Row& row : {Row{PixelFormat::nv12, "nv12", 0}, Row{PixelFormat::i420, "yuv420p", 0},
                         Row{PixelFormat::gray8, "gray", 0}, Row{PixelFormat::bgr8, "bgr24", 0},
                         Row{PixelFormat::rgb8, "rgb24", 0}}) {
    INFO(to_string(row.pixel));
    const std::vector<std::uint8_t> want = ffmpeg_frames(clip, row.ffmpeg, 3);
    auto r = open_video(clip);
    Frame f(320, 240, row.pixel);
    std::string why;
    for (int i = 0; i < 3; ++i) REQUIRE(r->read(f.target, why) == ReadStatus::frame);
    REQUIRE(want.size() == 3 * f.bytes.size());
    const Diff d = compare(f.bytes.data(), want.data() + 2 * f.bytes.size(), f.bytes.size());
    INFO("mean " << d.mean << " max " << d.max);
    CHECK(d.max <= row.tolerance);
  }
}

TEST_CASE("fit: letterbox and crop place the frame as computed on the CPU", "[media][libav][fit]") {
  const std::string clip = input("portrait.mp4");  // 96x160
  // The frame at its own size (stretch onto the same size: no scaling), as the reference.
  auto native_reader = open_video(clip);
  Frame native(96, 160, PixelFormat::bgr8);
  std::string why;
  REQUIRE(native_reader->read(native.target, why) == ReadStatus::frame);
  const cv::Mat ref(160, 96, CV_8UC3, native.bytes.data());

  SECTION("letterbox: the whole frame, aspect kept, centred on black") {
    const FitPlan plan = plan_fit(96, 160, 160, 96, Fit::letterbox);
    CHECK(plan.dest == PixelRect{51, 0, 58, 96});  // 96 x 0.6 = 57.6 wide
    auto r = open_video(clip, Fit::letterbox);
    Frame f(160, 96, PixelFormat::bgr8);
    REQUIRE(r->read(f.target, why) == ReadStatus::frame);
    const cv::Mat got(96, 160, CV_8UC3, f.bytes.data());
    cv::Mat want(96, 160, CV_8UC3, cv::Scalar::all(0));
    cv::resize(ref, want(cv::Rect(51, 0, 58, 96)), cv::Size(58, 96), 0, 0, cv::INTER_AREA);
    for (int y = 0; y < 96; ++y)
      for (int x = 0; x < 160; ++x)
        if (x < 51 || x >= 109)
          REQUIRE(got.at<cv::Vec3b>(y, x) == cv::Vec3b(0, 0, 0));  // the bars are black, exactly
    const Diff d = compare(got.data, want.data, got.total() * 3);
    INFO("mean " << d.mean << " max " << d.max);
    CHECK(d.mean < 4.0);  // bicubic (libswscale) against area (OpenCV) on a busy pattern
  }
  SECTION("letterbox in nv12: bars are limited-range black") {
    auto r = open_video(clip, Fit::letterbox);
    Frame f(160, 96, PixelFormat::nv12);
    REQUIRE(r->read(f.target, why) == ReadStatus::frame);
    for (int y = 0; y < 96; ++y) {
      CHECK(f.bytes[static_cast<std::size_t>(y * 160)] == 16);
      CHECK(f.bytes[static_cast<std::size_t>(y * 160 + 159)] == 16);
    }
    const std::size_t uv = 160 * 96;
    for (int y = 0; y < 48; ++y) {
      CHECK(f.bytes[uv + static_cast<std::size_t>(y * 160)] == 128);          // U left of the picture
      CHECK(f.bytes[uv + static_cast<std::size_t>(y * 160 + 159)] == 128);    // V right of it
    }
    const FitPlan plan = plan_fit(96, 160, 160, 96, Fit::letterbox, 2);
    CHECK(plan.dest == PixelRect{50, 0, 58, 96});  // even for whole chroma samples
  }
  SECTION("crop: the centre of the frame covers the target") {
    const FitPlan plan = plan_fit(96, 160, 160, 96, Fit::crop, 1, 2);
    CHECK(plan.source == PixelRect{0, 50, 96, 58});  // 96 / (160/96) = 57.6 rows, centred, even
    CHECK(plan.dest == PixelRect{0, 0, 160, 96});
    auto r = open_video(clip, Fit::crop);
    Frame f(160, 96, PixelFormat::bgr8);
    REQUIRE(r->read(f.target, why) == ReadStatus::frame);
    cv::Mat want;
    cv::resize(ref(cv::Rect(0, 50, 96, 58)), want, cv::Size(160, 96), 0, 0, cv::INTER_LINEAR);
    const Diff d = compare(f.bytes.data(), want.data, f.bytes.size());
    INFO("mean " << d.mean << " max " << d.max);
    CHECK(d.mean < 4.0);
    // Stretch of the same frame is far from it: the test tells the modes apart.
    auto s = open_video(clip, Fit::stretch);
    Frame g(160, 96, PixelFormat::bgr8);
    REQUIRE(s->read(g.target, why) == ReadStatus::frame);
    CHECK(compare(g.bytes.data(), want.data, g.bytes.size()).mean > 3 * d.mean);
  }
  SECTION("a rotated video is turned before it is fitted") {
    // rot90.mp4 stores 160x96 and shows 96x160: letterboxed into 160x96 like the portrait clip.
    auto r = open_video(input("rot90.mp4"), Fit::letterbox);
    Frame f(160, 96, PixelFormat::gray8);
    REQUIRE(r->read(f.target, why) == ReadStatus::frame);
    for (int y = 0; y < 96; ++y) {
      CHECK(f.bytes[static_cast<std::size_t>(y * 160 + 50)] == 0);
      CHECK(f.bytes[static_cast<std::size_t>(y * 160 + 110)] == 0);
    }
  }
}

TEST_CASE("plan_fit and rotate_plane", "[media][fit]") {
  CHECK(plan_fit(1080, 1920, 1920, 1080, Fit::letterbox, 2).dest == PixelRect{656, 0, 608, 1080});
  CHECK(plan_fit(1080, 1920, 1920, 1080, Fit::crop, 2, 2).source == PixelRect{0, 656, 1080, 608});
  CHECK(plan_fit(1920, 1080, 1920, 1080, Fit::letterbox).dest == PixelRect{0, 0, 1920, 1080});
  CHECK(plan_fit(1920, 1080, 224, 224, Fit::stretch).source == PixelRect{0, 0, 1920, 1080});
  CHECK(plan_fit(1920, 1080, 224, 224, Fit::crop).source == PixelRect{420, 0, 1080, 1080});
  CHECK(plan_fit(3, 1000, 16, 16, Fit::letterbox, 2).dest.width == 2);  // never below one aligned unit
  // unrotate_rect maps an upright rect back into the stored frame: the full frame maps to the full frame, and
  // a corner follows the turn (stored 8x4, shown 4x8 after a clockwise quarter turn).
  CHECK(unrotate_rect({0, 0, 4, 8}, 8, 4, 1) == PixelRect{0, 0, 8, 4});
  CHECK(unrotate_rect({0, 0, 1, 1}, 8, 4, 1) == PixelRect{0, 3, 1, 1});  // upright top-left = stored bottom-left
  CHECK(unrotate_rect({0, 0, 1, 1}, 8, 4, 2) == PixelRect{7, 3, 1, 1});
  CHECK(unrotate_rect({0, 0, 1, 1}, 8, 4, 3) == PixelRect{7, 0, 1, 1});

  // Against OpenCV's rotate on random planes of 1, 2 and 3 bytes per element, odd sizes, padded strides.
  cv::RNG rng(7);
  for (int bytes : {1, 2, 3})
    for (int turns = 0; turns < 4; ++turns) {
      INFO(bytes << " bytes, " << turns << " turns");
      const int w = 13, h = 7;
      cv::Mat src(h, w, CV_8UC(bytes));
      rng.fill(src, cv::RNG::UNIFORM, 0, 256);
      cv::Mat want = src.clone();
      if (turns == 1) cv::rotate(src, want, cv::ROTATE_90_CLOCKWISE);
      if (turns == 2) cv::rotate(src, want, cv::ROTATE_180);
      if (turns == 3) cv::rotate(src, want, cv::ROTATE_90_COUNTERCLOCKWISE);
      cv::Mat padded(want.rows, want.cols + 5, CV_8UC(bytes), cv::Scalar::all(0xee));
      cv::Mat got = padded(cv::Rect(0, 0, want.cols, want.rows));
      rotate_plane(src.data, static_cast<std::ptrdiff_t>(src.step), w, h, bytes, got.data,
                   static_cast<std::ptrdiff_t>(got.step), turns);
      CHECK(cv::norm(got, want, cv::NORM_INF) == 0);
      CHECK(cv::countNonZero(cv::Mat(padded(cv::Rect(want.cols, 0, 5, want.rows)).reshape(1) != 0xee)) == 0);  // stride kept
    }
}

TEST_CASE("damaged files end with a reason and never crash", "[media][libav][damaged]") {
  const std::vector<std::uint8_t> clip = read_bytes(input("clip.mp4"));
  REQUIRE(clip.size() > 4096);
  SECTION("every prefix (in steps) of a clip, demuxed from memory") {
    for (std::size_t n = 0; n <= clip.size(); n += 997) {
      INFO(n << " bytes");
      try {
        Demuxer d(std::span<const std::uint8_t>(clip.data(), n), "prefix", {});
        DemuxPacket p;
        std::string why;
        int packets = 0;
        DemuxStatus s;
        while ((s = d.read(p, why)) == DemuxStatus::packet) ++packets;
        CHECK(packets <= 48);
        if (s == DemuxStatus::error) CHECK_FALSE(why.empty());
      } catch (const InputError& e) {
        CHECK_THAT(std::string(e.what()), Catch::Contains("'prefix': "));
      }
    }
  }
  SECTION("bytes flipped in the middle of the picture data") {
    test::TempDir tmp("sluice-damaged");
    std::vector<std::uint8_t> bad = clip;
    for (std::size_t i = bad.size() / 3; i < bad.size() * 2 / 3; i += 101) bad[i] ^= 0x5a;
    const std::string path = tmp.str() + "/flipped.mp4";
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bad.data()),
                                                static_cast<std::streamsize>(bad.size()));
    auto r = open_video(path);
    Frame f(64, 48, PixelFormat::i420);
    std::string why;
    int frames = 0;
    ReadStatus s;
    while ((s = r->read(f.target, why)) == ReadStatus::frame) ++frames;
    INFO(frames << " frames; " << why);
    CHECK(frames <= 48);
    if (s == ReadStatus::error) CHECK_FALSE(why.empty());
    CHECK(r->read(f.target, why) == ReadStatus::end);
  }
  SECTION("a truncated file names how far it got") {
    const ReadToEnd got = read_to_end(input("truncated.mp4"));
    CHECK(got.status == ReadStatus::error);
    CHECK_THAT(got.why, Catch::Contains("ended after " + std::to_string(got.frames()) + " of 96 frames (truncated"));
  }
  SECTION("a corrupt file fails to open naming the file and FFmpeg's reason") {
    REQUIRE_THROWS_WITH(open_video(input("corrupt.mp4")),
                        Catch::Contains(input("corrupt.mp4")) &&
                            Catch::Contains("not a video FFmpeg can decode (unsupported or corrupt): "));
  }
}
