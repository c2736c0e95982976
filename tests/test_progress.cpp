#include <catch2/catch.hpp>

#include "daemon/progress.hpp"
#include "daemon/run_report.hpp"

#include <pty.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

using namespace sluice;

namespace {

constexpr std::int64_t kSec = 1'000'000'000;
constexpr std::int64_t kNow = 100 * kSec;

// An input that started `elapsed_s` seconds before kNow and settled `done` frames.
InputProgress input(std::uint32_t id, std::string uri, std::int64_t total, std::uint64_t done, double elapsed_s,
                    InputKind kind = InputKind::file, std::uint32_t source_id = 1) {
  InputProgress p;
  p.id = id;
  p.source_id = source_id;
  p.source = "clips";
  p.uri = std::move(uri);
  p.kind = kind;
  p.frames_total = total;
  p.decoded = done;
  p.delivered = done;
  p.started_ns = kNow - static_cast<std::int64_t>(elapsed_s * 1e9);
  return p;
}

SourceReport source(std::uint32_t id, std::string name, SourceState state, double fps) {
  SourceReport s;
  s.id = id;
  s.name = std::move(name);
  s.state = state;
  s.fps = fps;
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

int columns_of(const std::string& line) {
  int w = 0;
  for (unsigned char c : line)
    if ((c & 0xC0) != 0x80) ++w;
  return w;
}

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

}  // namespace

TEST_CASE("progress: a known total gives a bar, a percentage and an ETA", "[progress]") {
  // 40 of 120 frames in 2 s: 20 fps, 80 frames left = 4 s.
  const auto text = render_progress({input(1, "/data/clip.mp4", 120, 40, 2.0)}, {}, kNow, 120);
  REQUIRE(text == "[######..............]  40/120 frames  33%  20.0 fps  ETA 0:04  clip.mp4\n");
}

TEST_CASE("progress: an unknown total gives no bar, just the count and the rate", "[progress]") {
  const auto text =
      render_progress({input(2, "rtsp://cam.local/stream1", -1, 512, 20.0, InputKind::stream)}, {}, kNow, 120);
  REQUIRE(text == "512 frames  25.6 fps  rtsp://cam.local/stream1\n");
}

TEST_CASE("progress: ETA formats and unknown rates", "[progress]") {
  SECTION("hours") {
    // 1000 frames in 10 s = 100 fps; 999000 left = 9990 s = 2:46:30.
    const auto text = render_progress({input(1, "/d/long.mp4", 1'000'000, 1000, 10.0)}, {}, kNow, 120);
    REQUIRE_THAT(text, Catch::Contains("ETA 2:46:30"));
    REQUIRE_THAT(text, Catch::Contains("[....................]  1000/1000000 frames  0%"));
  }
  SECTION("no frame settled yet: no rate, no ETA") {
    const auto text = render_progress({input(1, "/d/a.mp4", 50, 0, 1.0)}, {}, kNow, 120);
    REQUIRE_THAT(text, Catch::Contains("0/50 frames  0%  0.0 fps  ETA -:--  a.mp4"));
  }
  SECTION("the reader ended: finishing instead of the ETA, the error when it ended early") {
    auto p = input(1, "/d/a.mp4", 50, 50, 1.0);
    p.ended = true;
    REQUIRE_THAT(render_progress({p}, {}, kNow, 120), Catch::Contains("50/50 frames  100%  50.0 fps  finishing  a.mp4"));
    p.error = "decode error at frame 51";
    REQUIRE_THAT(render_progress({p}, {}, kNow, 120), Catch::Contains("  error  a.mp4"));
  }
  SECTION("complete inputs get no line") {
    auto p = input(1, "/d/a.mp4", 50, 50, 1.0);
    p.ended = p.complete = true;
    p.completed_ns = kNow;
    REQUIRE(render_progress({p}, {}, kNow, 120).empty());
  }
}

TEST_CASE("progress: every line fits the width and long names are shortened in the middle", "[progress]") {
  const std::string long_name = "/data/" + std::string(150, 'a') + "_the_end.mp4";
  auto stalled = source(3, "a-camera-with-a-very-long-name-indeed", SourceState::stalled, 0);
  stalled.reason = "no frame for 12.5 s (rtsp://10.0.0.7:554/h264/ch1/main/av_stream timed out after 5 s)";
  auto job = source(1, "clips", SourceState::live, 180.0);
  job.inputs_total = 1200;
  job.inputs_done = 15;
  job.inputs_failed = 2;
  job.frames = 4520;
  const std::vector<InputProgress> inputs{input(1, long_name, 120, 40, 2.0),
                                          input(2, "rtsp://cam/" + std::string(80, 'x'), -1, 9, 1.0, InputKind::stream)};
  for (int columns = 10; columns <= 200; columns += 7) {
    const auto text = render_progress(inputs, {job, stalled}, kNow, columns);
    const auto lines = lines_of(text);
    REQUIRE(lines.size() == 5);
    for (const auto& line : lines) {
      INFO("columns " << columns << ": '" << line << "'");
      REQUIRE(columns_of(line) <= columns);
    }
  }
  const auto lines = lines_of(render_progress(inputs, {job, stalled}, kNow, 80));
  const std::string& bar = lines[2];
  REQUIRE(columns_of(bar) == 80);  // the name takes the room left
  REQUIRE(bar.rfind("[", 0) == 0);
  REQUIRE_THAT(bar, Catch::Contains("  aaaa") && Catch::Contains("...") && Catch::EndsWith("end.mp4"));
  // A narrow terminal drops the bar before the numbers.
  const auto narrow = lines_of(render_progress(inputs, {}, kNow, 40));
  REQUIRE(narrow[0].rfind("40/120 frames  33%", 0) == 0);
  // Unlimited width: nothing shortened.
  REQUIRE_THAT(render_progress(inputs, {}, kNow, 0), Catch::Contains(long_name.substr(6)));
}

TEST_CASE("progress: a stalled, backing-off or failed source shows why", "[progress]") {
  auto live = source(1, "cam0", SourceState::live, 29.94);
  live.reason = "an old error";  // live: not shown
  auto stalled = source(2, "lobby", SourceState::stalled, 0);
  stalled.reason = "no frame for 6.2 s";
  auto backoff = source(3, "gate", SourceState::backoff, 0);
  backoff.reason = "connection refused";
  backoff.next_attempt_in_s = 2.5;
  auto failed = source(4, "dock", SourceState::failed, 0);
  failed.reason = "gave up after 5 attempts: 404 Not Found";
  auto quiet = source(5, "yard", SourceState::stalled, 0);
  quiet.since_last_frame_s = 7.04;
  const auto lines = lines_of(render_progress({}, {live, stalled, backoff, failed, quiet}, kNow, 120));
  REQUIRE(lines.size() == 5);
  REQUIRE(lines[0] == "cam0   live          29.9 fps");
  REQUIRE(lines[1] == "lobby  stalled        0.0 fps  no frame for 6.2 s");
  REQUIRE(lines[2] == "gate   backoff        0.0 fps  connection refused; retry in 2.5 s");
  REQUIRE(lines[3] == "dock   failed         0.0 fps  gave up after 5 attempts: 404 Not Found");
  REQUIRE(lines[4] == "yard   stalled        0.0 fps  no frame for 7.0 s");
  // Narrow: the reason is shortened, not the state.
  const auto narrow = lines_of(render_progress({}, {stalled}, kNow, 40));
  REQUIRE(narrow[0] == "lobby  stalled        0.0 fps  no fra...");
}

// A directory job's file names are any bytes whoever fills the folder chose: printed raw, an ESC sequence drives
// the terminal (retitles it, recolours it) and a newline forges a line of the display.
TEST_CASE("progress: names and reasons from outside reach the terminal as visible escapes", "[progress]") {
  const std::string evil = "evil\n2026-12-07 error forged\x1b]0;owned\x07\x1b[31m.mp4";
  auto job = source(1, "in\x1b[2J", SourceState::failed, 0);
  job.inputs_total = 2;
  job.reason = "cannot open '" + evil + "'";
  const auto p = input(7, "/in/" + evil, 100, 10, 1.0);
  const std::string text = render_progress({p}, {job}, kNow, 0);
  INFO(text);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\x07') == std::string::npos);
  CHECK(lines_of(text).size() == 3);  // the source, the input, the overall line
  CHECK(text.find("evil\\n2026-12-07 error forged\\x1B]0;owned\\x07\\x1B[31m.mp4") != std::string::npos);
  CHECK(text.find("in\\x1B[2J") != std::string::npos);
  // What a stop prints names them the same way.
  auto cut = p;
  cut.interrupted = true;
  const std::string stopped = describe_interruption("Interrupt", {}, {job}, {cut});
  INFO(stopped);
  CHECK(stopped.find('\x1b') == std::string::npos);
  CHECK(stopped.find("input /in/evil\\n") != std::string::npos);
  CHECK(stopped.find("in\\x1B[2J: 0 of 2 files finished") != std::string::npos);
}

// Issue 33 (16): the overall line counted the frames decoded while the input lines count those through the sink,
// so while a job ran its total was ahead of its inputs' sum by what was in flight (682 against 627 frames).
TEST_CASE("progress: the overall line counts the frames the input lines count", "[progress]") {
  auto job = source(1, "clips", SourceState::live, 50.0);
  job.inputs_total = 3;
  job.inputs_done = 1;
  job.frames = 682;  // decoded: 55 ahead of the sink
  auto done = input(7, "/d/c1.mp4", 500, 500, 10.0);
  done.ended = done.complete = true;
  const auto open = input(8, "/d/c2.mp4", 250, 92, 2.0), other = input(9, "/d/c3.mp4", -1, 35, 2.0);
  FrameLedger::Totals frames;
  frames.sources[1] = {.produced = 682, .delivered = 620, .dropped = 5, .failed = 2};
  frames.sources[2] = {.produced = 99, .delivered = 99};  // another source's frames are not the job's
  const auto lines = lines_of(render_progress({open, other, done}, {job}, kNow, 120, &frames));
  REQUIRE_THAT(lines.back(), Catch::StartsWith("total  files 1/3  627 frames  "));
  // Without the ledger (as before), the frames decoded.
  REQUIRE_THAT(lines_of(render_progress({open, other, done}, {job}, kNow, 120)).back(), Catch::Contains("  682 frames  "));
}

TEST_CASE("progress: a job shows files per source and an overall line with an ETA", "[progress]") {
  auto job = source(1, "clips", SourceState::live, 50.0);
  job.inputs_total = 10;
  job.inputs_done = 5;
  job.inputs_failed = 1;
  job.inputs_skipped = 2;
  job.frames = 1234;

  SECTION("files not opened yet: estimated from the mean frame count seen") {
    // 8 of 10 finished, one open (100 of 200 left); one file not opened, estimated at the mean of 200 and
    // 100 frames = 150: 250 frames at 50 fps = 5 s.
    auto done = input(7, "/d/done.mp4", 100, 100, 2.0);
    done.ended = done.complete = true;
    done.completed_ns = kNow;
    const auto lines = lines_of(render_progress({input(8, "/d/open.mp4", 200, 100, 2.0), done}, {job}, kNow, 120));
    REQUIRE(lines.size() == 3);
    REQUIRE(lines[0] == "clips  live          50.0 fps  files 8/10  1 failed  2 skipped");
    REQUIRE_THAT(lines[1], Catch::Contains("100/200 frames") && Catch::EndsWith("open.mp4"));
    REQUIRE(lines[2] == "total  files 8/10  1 failed  2 skipped  1234 frames  50.0 fps  ETA ~0:05");
  }
  SECTION("every remaining file open with a known total: an exact ETA") {
    job.inputs_done = 6;  // 9 finished, one open
    const auto lines = lines_of(render_progress({input(8, "/d/open.mp4", 200, 100, 2.0)}, {job}, kNow, 120));
    REQUIRE(lines.back() == "total  files 9/10  1 failed  2 skipped  1234 frames  50.0 fps  ETA 0:02");
  }
  SECTION("an open input without a known total: no ETA") {
    job.inputs_done = 6;
    const auto lines = lines_of(render_progress({input(8, "/d/open.mp4", -1, 100, 2.0)}, {job}, kNow, 120));
    REQUIRE_THAT(lines.back(), Catch::EndsWith("ETA -:--"));
  }
  SECTION("all files finished: the rate over the time it ran, not the idle window's 0.0") {
    job.inputs_done = 7;
    job.fps = 0;
    job.mean_fps = 41.13;
    job.state = SourceState::eos;
    const auto lines = lines_of(render_progress({}, {job}, kNow, 120));
    REQUIRE(lines.size() == 2);
    REQUIRE(lines[0] == "clips  eos           41.1 fps  files 10/10  1 failed  2 skipped");
    REQUIRE(lines[1] == "total  files 10/10  1 failed  2 skipped  1234 frames  41.1 fps  done");
  }
  SECTION("frames in too short a time to rate: said, not 0.0") {
    job.inputs_done = 7;
    job.fps = 0;
    job.state = SourceState::eos;
    REQUIRE(lines_of(render_progress({}, {job}, kNow, 120))[0] == "clips  eos              - fps  files 10/10  1 failed  2 skipped");
  }
  SECTION("a source a stop ended before its end says stopped") {
    job.fps = 0;
    job.mean_fps = 0.02;
    job.state = SourceState::eos;
    job.stopped = true;
    REQUIRE_THAT(lines_of(render_progress({}, {job}, kNow, 120))[0], Catch::StartsWith("clips  stopped       0.02 fps"));
  }
  SECTION("live sources alone get no overall line") {
    REQUIRE(lines_of(render_progress({}, {source(2, "cam", SourceState::live, 30)}, kNow, 120)).size() == 1);
  }
}

TEST_CASE("progress: many inputs in progress are summarised", "[progress]") {
  std::vector<InputProgress> inputs;
  for (std::uint32_t i = 1; i <= 20; ++i) inputs.push_back(input(i, "/d/f" + std::to_string(i) + ".mp4", 10, 1, 1.0));
  const auto lines = lines_of(render_progress(inputs, {}, kNow, 100));
  REQUIRE(lines.size() == 13);
  REQUIRE(lines.back() == "+ 8 more inputs in progress");
}

TEST_CASE("progress: the JSON form has every field", "[progress]") {
  auto running = input(1, "/data/clip.mp4", 120, 40, 2.0);
  running.decoded = 45;
  running.dropped = 0;
  auto live = input(2, "rtsp://cam/1", -1, 10, 1.0, InputKind::stream);
  auto finishing = input(3, "/data/b.mp4", 10, 8, 1.0);
  finishing.decoded = 10;
  finishing.ended = true;
  auto failed = input(4, "/data/bad.mp4", 10, 3, 1.0);
  failed.failed = 1;
  failed.ended = failed.complete = true;
  failed.completed_ns = kNow;
  failed.error = "corrupt packet";
  auto done = input(5, "/data/ok.mp4", 10, 10, 1.0);
  done.ended = done.complete = true;
  done.completed_ns = kNow;

  auto stopped = input(6, "/data/half.mp4", 10, 4, 1.0);
  stopped.ended = stopped.complete = stopped.interrupted = true;
  stopped.completed_ns = kNow;
  stopped.error = "stopped before its end";  // as InputTracker::interrupt() says it
  auto removed = input(7, "rtsp://cam/2", -1, 4, 1.0, InputKind::stream);
  removed.ended = removed.complete = removed.interrupted = removed.removed = true;
  removed.completed_ns = kNow;
  removed.error = "its source was removed";

  const auto j = progress_json({running, live, finishing, failed, done, stopped, removed}, kNow);
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 7);
  const auto& r = j[0];
  REQUIRE(r["id"] == 1);
  REQUIRE(r["source"] == "clips");
  REQUIRE(r["uri"] == "/data/clip.mp4");
  REQUIRE(r["kind"] == "file");
  REQUIRE(r["frames_done"] == 40);
  REQUIRE(r["frames_total"] == 120);
  REQUIRE(r["decoded"] == 45);
  REQUIRE(r["delivered"] == 40);
  REQUIRE(r["dropped"] == 0);
  REQUIRE(r["failed"] == 0);
  REQUIRE(r["fps"].get<double>() == Approx(20.0));
  REQUIRE(r["eta_s"].get<double>() == Approx(4.0));
  REQUIRE(r["state"] == "decoding");
  REQUIRE(r["error"] == "");
  REQUIRE(j[1]["kind"] == "stream");
  REQUIRE(j[1]["frames_total"].is_null());
  REQUIRE(j[1]["eta_s"].is_null());
  REQUIRE(j[2]["state"] == "finishing");
  REQUIRE(j[3]["state"] == "failed");
  REQUIRE(j[3]["error"] == "corrupt packet");
  REQUIRE(j[3]["frames_done"] == 4);
  REQUIRE(j[4]["state"] == "done");
  REQUIRE(j[4]["eta_s"].get<double>() == 0.0);
  REQUIRE(j[5]["state"] == "interrupted");  // stopped, not failed
  REQUIRE(j[6]["state"] == "removed");
  REQUIRE(j[6]["error"] == "its source was removed");
}

TEST_CASE("progress display: redraws in place with cursor-up and line clears", "[progress]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  REQUIRE_FALSE(ProgressDisplay::wanted(f));  // not a terminal
  {
    ProgressDisplay d(f);
    d.update("a\nb\n");
    REQUIRE(read_all(f) == "\x1b[2Ka\n\x1b[2Kb\n");
    std::fseek(f, 0, SEEK_END);

    d.update("c\nd\ne");  // grows; no trailing newline needed
    REQUIRE(read_all(f) == "\x1b[2Ka\n\x1b[2Kb\n"
                           "\r\x1b[2A\x1b[2Kc\n\x1b[2Kd\n\x1b[2Ke\n");
    std::fseek(f, 0, SEEK_END);
    const auto before = read_all(f).size();
    std::fseek(f, 0, SEEK_END);

    d.update("c\nd\ne");  // unchanged: nothing written
    REQUIRE(read_all(f).size() == before);
    std::fseek(f, 0, SEEK_END);

    d.update("f\n");  // shrinks: the lines left below are cleared
    REQUIRE(read_all(f).substr(before) == "\r\x1b[3A\x1b[2Kf\n\x1b[J");
    std::fseek(f, 0, SEEK_END);

    d.finish();  // the block stays; the next one starts below it
    const auto at_finish = read_all(f).size();
    std::fseek(f, 0, SEEK_END);
    d.update("g\nh");
    REQUIRE(read_all(f).substr(at_finish) == "\x1b[2Kg\n\x1b[2Kh\n");
    std::fseek(f, 0, SEEK_END);

    const auto at_clear = read_all(f).size();
    std::fseek(f, 0, SEEK_END);
    d.clear();
    REQUIRE(read_all(f).substr(at_clear) == "\r\x1b[2A\x1b[J");
    std::fseek(f, 0, SEEK_END);
  }
  std::fclose(f);
}

TEST_CASE("progress display: same_terminal tells one terminal from another and from a file", "[progress]") {
  // Two ptys stand for two terminals; a second descriptor of the first one is that same terminal.
  int master_a = -1, slave_a = -1, master_b = -1, slave_b = -1;
  REQUIRE(::openpty(&master_a, &slave_a, nullptr, nullptr, nullptr) == 0);
  REQUIRE(::openpty(&master_b, &slave_b, nullptr, nullptr, nullptr) == 0);
  std::FILE* a = ::fdopen(slave_a, "w");
  std::FILE* a_again = ::fdopen(::dup(slave_a), "w");
  std::FILE* b = ::fdopen(slave_b, "w");
  std::FILE* file = std::tmpfile();
  REQUIRE((a && a_again && b && file));
  CHECK(ProgressDisplay::same_terminal(a, a_again));
  CHECK_FALSE(ProgressDisplay::same_terminal(a, b));
  CHECK_FALSE(ProgressDisplay::same_terminal(a, file));
  CHECK_FALSE(ProgressDisplay::same_terminal(file, file));  // a file is no terminal, even the same one
  CHECK_FALSE(ProgressDisplay::same_terminal(a, nullptr));
  for (std::FILE* f : {a, a_again, b, file}) std::fclose(f);
  ::close(master_a);
  ::close(master_b);
}
