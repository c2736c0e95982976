// Input classification, directory and glob expansion, and default source names (runtime/inputs.hpp).
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/source_kind.hpp"
#include "runtime/inputs.hpp"
#include "temp_dir.hpp"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

using TempDir = sluice::test::TempDir;

std::vector<std::string> paths_of(const ExpandedSource& e) {
  std::vector<std::string> out;
  for (const auto& [p, k] : e.inputs) out.push_back(p);
  return out;
}

}  // namespace

TEST_CASE("classify_uri sorts URIs into input kinds by their shape", "[inputs]") {
  struct Row {
    const char* uri;
    InputKind kind;
  };
  const Row rows[] = {
      {"testsrc:bars", InputKind::testsrc},
      {"testsrc:noise", InputKind::testsrc},
      {"rtsp://cam.local:554/stream1", InputKind::stream},
      {"RTSP://CAM/x", InputKind::stream},
      {"rtsps://cam/x", InputKind::stream},
      {"rtmp://live.example/app/key", InputKind::stream},
      {"http://example.com/video.mp4", InputKind::stream},
      {"https://example.com/live.m3u8?token=a*b", InputKind::stream},
      {"tcp://127.0.0.1:9000", InputKind::stream},
      {"udp://@:1234", InputKind::stream},
      {"srt://host:7000?mode=caller", InputKind::stream},
      {"/dev/video0", InputKind::camera},
      {"/dev/video12", InputKind::camera},
      {"v4l2:0", InputKind::camera},
      {"v4l2:/dev/video3", InputKind::camera},
      {"/dev/v4l/by-id/usb-Logitech_C920-video-index0", InputKind::camera},
      {"/dev/videox", InputKind::file},
      {"/dev/video", InputKind::file},
      {"frames/img_%04d.png", InputKind::image_sequence},
      {"frames/img_%d.JPG", InputKind::image_sequence},
      {"my%20dance.mp4", InputKind::file},  // a percent in a video name is not a sequence
      {"photo.png", InputKind::image},
      {"photo.JPEG", InputKind::image},
      {"a/b/scan.tiff", InputKind::image},
      {"x.tif", InputKind::image},
      {"x.webp", InputKind::image},
      {"x.bmp", InputKind::image},
      {"x.pgm", InputKind::image},
      {"x.ppm", InputKind::image},
      {"clip.mp4", InputKind::file},
      {"/data/clip.MKV", InputKind::file},
      {"notes.txt", InputKind::file},
      {"clips/", InputKind::file},
      {"clips/*.mp4", InputKind::file},
      {"png", InputKind::file},
      {".png", InputKind::file},  // a hidden name, not an extension
      {"", InputKind::file},
  };
  for (const Row& r : rows) {
    INFO(r.uri);
    CHECK(classify_uri(r.uri) == r.kind);
  }
}

TEST_CASE("expand_source keeps a single URI as one input of its kind", "[inputs]") {
  const ExpandedSource missing = expand_source("/nonexistent/dir/clip.mp4");  // fails later, when opened
  CHECK_FALSE(missing.job);
  REQUIRE(missing.inputs.size() == 1);
  CHECK(missing.inputs[0].first == "/nonexistent/dir/clip.mp4");
  CHECK(missing.inputs[0].second == InputKind::file);

  const ExpandedSource stream = expand_source("http://host/live?x=1&y=[2]");  // '?' and '[' but not a glob
  CHECK_FALSE(stream.job);
  CHECK(stream.kind == InputKind::stream);
  REQUIRE(stream.inputs.size() == 1);
  CHECK(stream.inputs[0].second == InputKind::stream);

  CHECK(expand_source("testsrc:bars").inputs.at(0).second == InputKind::testsrc);
  CHECK(expand_source("v4l2:0").inputs.at(0).second == InputKind::camera);
  CHECK(expand_source("seq/f_%04d.png").inputs.at(0).second == InputKind::image_sequence);
  CHECK(expand_source("one.jpg").inputs.at(0).second == InputKind::image);
}

TEST_CASE("a directory expands to its video and image files sorted and not recursively", "[inputs]") {
  TempDir d;
  d.touch("b.mp4");
  d.touch("A.MKV");
  d.touch("c.png");
  d.touch("d.avi");
  d.touch("notes.txt");
  d.touch(".hidden.mp4");
  d.touch("sub/deep.mp4");
  fs::create_directory(d.path / "dir.mp4");  // a directory with a video's name is not an input
  for (const std::string& uri : {d.str(), d.str() + "/"}) {
    INFO(uri);
    const ExpandedSource e = expand_source(uri);
    CHECK(e.job);
    CHECK(e.kind == InputKind::file);
    REQUIRE(e.inputs.size() == 4);
    CHECK(fs::path(e.inputs[0].first).filename() == "A.MKV");
    CHECK(fs::path(e.inputs[1].first).filename() == "b.mp4");
    CHECK(fs::path(e.inputs[2].first).filename() == "c.png");
    CHECK(fs::path(e.inputs[3].first).filename() == "d.avi");
    CHECK(e.inputs[0].second == InputKind::file);
    CHECK(e.inputs[2].second == InputKind::image);
    for (const auto& p : paths_of(e)) CHECK(fs::is_regular_file(p));  // usable paths, not bare names
  }
}

// Issue 33: a FIFO named like a video in a job's directory vanished from the job without a word. It is an input
// now: its reader refuses it by what it is (without opening it), so it is a failed input with the reason.
TEST_CASE("a FIFO or dangling link named like a media file is an input of the job, not left out", "[inputs]") {
  TempDir d;
  d.touch("a.mp4");
  REQUIRE(::mkfifo((d.path / "b.mp4").c_str(), 0600) == 0);
  REQUIRE(::mkfifo((d.path / "notes.txt").c_str(), 0600) == 0);  // not a media name: not an input, as before
  fs::create_symlink(d.path / "gone.mp4", d.path / "c.png");
  fs::create_directory(d.path / "dir.mp4");
  const ExpandedSource e = expand_source(d.str());
  REQUIRE(e.inputs.size() == 3);
  CHECK(fs::path(e.inputs[0].first).filename() == "a.mp4");
  CHECK(fs::path(e.inputs[1].first).filename() == "b.mp4");
  CHECK(fs::path(e.inputs[2].first).filename() == "c.png");
  CHECK(e.inputs[2].second == InputKind::image);
  const ExpandedSource g = expand_source(d.str() + "/*.mp4");  // a glob likewise; the directory is left out
  REQUIRE(g.inputs.size() == 2);
  CHECK(fs::path(g.inputs[1].first).filename() == "b.mp4");
}

TEST_CASE("a directory without media files is an error naming the extensions", "[inputs]") {
  TempDir d;
  try {
    expand_source(d.str());
    FAIL("expected InputError");
  } catch (const InputError& e) {
    const std::string msg = e.what();
    CHECK(msg.find(d.str()) != std::string::npos);
    CHECK(msg.find("no video or image files") != std::string::npos);
    CHECK(msg.find(".mp4") != std::string::npos);
    CHECK(msg.find(".png") != std::string::npos);
  }
  d.touch("readme.txt");
  d.touch("sub/clip.mp4");
  REQUIRE_THROWS_WITH(expand_source(d.str()), Catch::Contains("1 other file") && Catch::Contains("subdirectories"));
}

TEST_CASE("an unreadable directory is an error", "[inputs]") {
  if (::geteuid() == 0) {
    WARN("running as root: permissions do not stop reading; skipped");
    return;
  }
  TempDir d;
  d.touch("locked/clip.mp4");
  fs::permissions(d.path / "locked", fs::perms::none);
  REQUIRE_THROWS_AS(expand_source((d.path / "locked").string()), InputError);
  REQUIRE_THROWS_WITH(expand_source((d.path / "locked").string()), Catch::Contains("cannot read directory"));
  fs::permissions(d.path / "locked", fs::perms::owner_all);
}

TEST_CASE("a glob expands to the regular files it matches sorted", "[inputs]") {
  TempDir d;
  d.touch("cam2.mp4");
  d.touch("cam1.mp4");
  d.touch("cam10.avi");
  d.touch("other.mp4");
  d.touch("cam3.txt");
  fs::create_directory(d.path / "cam4.mp4");

  const ExpandedSource e = expand_source(d.str() + "/cam*.mp4");
  CHECK(e.job);
  REQUIRE(e.inputs.size() == 2);
  CHECK(fs::path(e.inputs[0].first).filename() == "cam1.mp4");
  CHECK(fs::path(e.inputs[1].first).filename() == "cam2.mp4");

  const ExpandedSource all = expand_source(d.str() + "/cam*");  // every regular file, whatever it is
  REQUIRE(all.inputs.size() == 4);
  CHECK(fs::path(all.inputs[2].first).filename() == "cam2.mp4");
  CHECK(fs::path(all.inputs[3].first).filename() == "cam3.txt");
  CHECK(all.inputs[3].second == InputKind::file);

  CHECK(expand_source(d.str() + "/cam[12].mp4").inputs.size() == 2);
  CHECK(expand_source(d.str() + "/cam?.mp4").inputs.size() == 2);

  REQUIRE_THROWS_AS(expand_source(d.str() + "/*.mov"), InputError);
  REQUIRE_THROWS_WITH(expand_source(d.str() + "/*.mov"), Catch::Contains("matches no files"));
  REQUIRE_THROWS_WITH(expand_source(d.str() + "/cam4*"), Catch::Contains("matches no files (only 1 directory)"));
}

TEST_CASE("an existing file whose name holds glob characters is that file", "[inputs]") {
  TempDir d;
  const std::string weird = d.touch("take[1].mp4");
  d.touch("take1.mp4");
  const ExpandedSource e = expand_source(weird);
  CHECK_FALSE(e.job);
  REQUIRE(e.inputs.size() == 1);
  CHECK(e.inputs[0].first == weird);
}

TEST_CASE("default_source_name is short and stable and safe", "[inputs]") {
  TempDir d;
  fs::create_directory(d.path / "parking lot");
  struct Row {
    std::string uri, name;
  };
  const Row rows[] = {
      {"/data/clips/entrance.mp4", "entrance"},
      {"clip.v2.mkv", "clip.v2"},
      {"photo.JPG", "photo"},
      {"/dev/video0", "video0"},
      {"v4l2:2", "video2"},
      {"v4l2:/dev/video3", "video3"},
      {"rtsp://user:secret@cam.local:554/stream1", "cam.local-554"},
      {"rtsp://cam.local/stream1", "cam.local"},
      {"tcp://127.0.0.1:9000?listen=1", "127.0.0.1-9000"},
      {"udp://@:1234", "udp-1234"},
      {"http://[::1]:8080/x", "1-8080"},
      {"testsrc:bars", "testsrc-bars"},
      {"frames/img_%04d.png", "img"},
      {"frames/%04d.png", "frames"},
      {"/data/clips/", "clips"},
      {"/data/clips/cam*.mp4", "clips"},
      {(d.path / "parking lot").string(), "parking-lot"},
      {"weird name (1).mp4", "weird-name-1"},
      {"caméra.mp4", "cam-ra"},
      {"", "source"},
  };
  for (const Row& r : rows) {
    INFO(r.uri);
    CHECK(default_source_name(r.uri) == r.name);
  }
  for (const Row& r : rows) {
    const std::string n = default_source_name(r.uri);
    CHECK(n.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
          std::string::npos);
    CHECK(default_source_name(r.uri) == n);
  }
}
