// FFmpeg's own log lines through sluice's logger, rate-limited per input, and stream reasons that keep
// FFmpeg's error text.
#include <catch2/catch.hpp>

#include <spdlog/spdlog.h>

extern "C" {
#include <libavutil/log.h>
}

#include "media/demux.hpp"
#include "media/libav_log.hpp"
#include "runtime/frame_reader.hpp"
#include "server_process.hpp"
#include "captured_log.hpp"

using namespace sluice;

TEST_CASE("FFmpeg's error lines reach sluice's log as warnings, a few per input per window, the rest counted",
          "[libav][log]") {
  sluice::test::CapturedLog log("%l %v");
  route_libav_logging();
  LibavLog cam("rtsp://cam/1"), other("rtsp://cam/2");
  {
    const LibavLogScope scope(cam);
    for (int i = 0; i < 200; ++i) av_log(nullptr, AV_LOG_ERROR, "non-existing PPS %d referenced\n", i);
    av_log(nullptr, AV_LOG_INFO, "an info line is never logged\n");
    const LibavLogScope nested(other);  // nests: the inner scope's input owns the lines
    av_log(nullptr, AV_LOG_ERROR, "Connection refused\n");
  }
  const auto cam_lines = log.lines_with("FFmpeg (rtsp://cam/1)");
  CHECK(cam_lines.size() == static_cast<std::size_t>(LibavLog::kLinesPerWindow));  // not 200
  REQUIRE_FALSE(cam_lines.empty());
  CHECK(cam_lines[0] == "warning FFmpeg (rtsp://cam/1): non-existing PPS 0 referenced");
  CHECK(cam.last_error() == "non-existing PPS 199 referenced");
  CHECK(log.lines_with("info line").empty());
  const auto other_lines = log.lines_with("FFmpeg (rtsp://cam/2)");  // its own allowance
  REQUIRE(other_lines.size() == 1);
  CHECK(other.last_error() == "Connection refused");
}

TEST_CASE("the status of an HTTP error reply is read from FFmpeg's line (its return code names only the class)",
          "[libav][log]") {
  route_libav_logging();
  LibavLog web("https://media.example/a.mp4");
  CHECK(web.http_status() == 0);
  {
    const LibavLogScope scope(web);
    av_log(nullptr, AV_LOG_WARNING, "HTTP error %d %s\n", 429, "Too Many Requests");
  }
  CHECK(web.http_status() == 429);
  {
    const LibavLogScope scope(web);
    av_log(nullptr, AV_LOG_WARNING, "HTTP error %d %s\n", 50000, "hostile");  // not a status: ignored
    av_log(nullptr, AV_LOG_WARNING, "HTTP error 503 in a line of another shape\n");
  }
  CHECK(web.http_status() == 429);
}

TEST_CASE("a stream that cannot be opened says FFmpeg's reason, not a list of guesses", "[libav][log]") {
  sluice::test::CapturedLog log("%l %v");
  const std::string uri = "tcp://127.0.0.1:" + std::to_string(sluice::test::free_loopback_port()) + "?timeout=0";
  DemuxOptions options;
  options.open_timeout_s = 5;
  try {
    Demuxer demux(uri, options);
    FAIL("opened a port nothing listens on");
  } catch (const InputError& e) {
    const std::string why = e.what();
    INFO(why);
    CHECK(why.find("cannot open the stream: ") != std::string::npos);
    CHECK(why.find("Connection refused") != std::string::npos);  // FFmpeg's text for the code
    CHECK(why.find("Connection to tcp://127.0.0.1:") != std::string::npos);  // and the line FFmpeg logged
    CHECK(why.find("[tcp @") == std::string::npos);  // without its context prefix
    CHECK(why.find("nothing answered") == std::string::npos);  // no list of guesses
    CHECK_FALSE(e.transient);  // a stream, not a job's remote file: never tried again by a job
    CHECK(why.find("Connection to tcp://127.0.0.1:" + uri.substr(uri.rfind(':') + 1, uri.find('?') - uri.rfind(':') - 1) +
                   " failed") != std::string::npos);  // FFmpeg's inner options (the URL's query) left out
  }
  // The reason is logged by whoever gives it (the source's state line); FFmpeg's line is not logged again.
  CHECK(log.lines_with("warning FFmpeg (").empty());
}
