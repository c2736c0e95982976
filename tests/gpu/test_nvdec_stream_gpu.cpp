// Live network streams on NVDEC (media/nvdec/container_reader.hpp, open_nvdec_stream_reader): a camera's MPEG-TS
// served over TCP by the test itself decodes on NVDEC, to the
// frames NVDEC makes of the same file read as a file; with TS packets lost in transit, the damaged pictures and
// the ones after them up to the next keyframe fail with the reason, and every picture that goes out is exactly the
// file's picture of the same time. The clip: tests/data/nvdec/README.md.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "media/nvdec/container_reader.hpp"
#include "media/nvdec/nvdec_decoder.hpp"
#include "runtime/frame_reader.hpp"
#include "tests/video_reference.hpp"

using namespace sluice;
using namespace sluice::test;

namespace {

constexpr int kWidth = 320, kHeight = 240;
constexpr std::size_t kTsPacket = 188;

// Serves `bytes` to the first client on a loopback port, leaving out TS packets [drop_first, drop_last), then
// closes: a camera whose connection ends.
class OneShotServer {
 public:
  OneShotServer(std::vector<char> bytes, std::size_t drop_first = 0, std::size_t drop_last = 0)
      : bytes_(std::move(bytes)), drop_first_(drop_first), drop_last_(drop_last) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 1) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~OneShotServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

 private:
  void serve() {
    const int client = ::accept(fd_, nullptr, nullptr);
    if (client < 0) return;
    for (std::size_t at = 0; at < bytes_.size(); at += kTsPacket) {
      const std::size_t packet = at / kTsPacket;
      if (packet >= drop_first_ && packet < drop_last_) continue;
      const std::size_t n = std::min(kTsPacket, bytes_.size() - at);
      if (::send(client, bytes_.data() + at, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) break;
    }
    ::close(client);
  }
  std::vector<char> bytes_;
  std::size_t drop_first_, drop_last_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct Read {
  std::map<std::int64_t, std::vector<std::byte>> frames;  // by pts
  std::vector<std::string> failed;                        // the reasons, in order
  std::vector<bool> fates;                                 // true: a frame, false: failed, in order
  ReadStatus last = ReadStatus::frame;
};

Read read_all(FrameReader& reader) {
  Read out;
  const std::size_t bytes = image_bytes(PixelFormat::bgr8, kWidth, kHeight);
  for (int guard = 0; guard < 1000; ++guard) {
    std::vector<std::byte> frame(bytes);
    std::string why;
    out.last = reader.read(FrameTarget{frame.data(), kWidth, kHeight, PixelFormat::bgr8}, why);
    if (out.last == ReadStatus::failed) {
      out.failed.push_back(why);
      out.fates.push_back(false);
      continue;
    }
    if (out.last != ReadStatus::frame) break;
    REQUIRE(reader.pts_ns());
    out.frames[*reader.pts_ns()] = std::move(frame);
    out.fates.push_back(true);
  }
  return out;
}

ReaderOptions on_nvdec() {
  ReaderOptions o;
  o.decoder = DecoderChoice::gpu;
  o.open_timeout_s = 10;
  o.read_timeout_s = 5;
  return o;
}

}  // namespace

TEST_CASE("a live stream decodes on NVDEC to the frames of the same file", "[gpu][nvdec][stream]") {
  REQUIRE(nvdec_unavailable_reason().empty());
  const std::string path = clip("live_320x240.ts");
  auto file_reader = ReaderRegistry::global().open(InputKind::file, path, on_nvdec());
  const Read want = read_all(*file_reader);
  REQUIRE(want.frames.size() == 90);

  OneShotServer server(file_bytes(path));
  std::string declined;
  auto reader = open_nvdec_stream_reader(server.url(), on_nvdec(), declined);
  INFO(declined);
  REQUIRE(reader);
  CHECK_THAT(reader->info().backend, Catch::StartsWith("NVDEC H.264 (mpegts)"));
  CHECK(reader->info().kind == InputKind::stream);
  const Read got = read_all(*reader);
  CHECK(got.failed.empty());
  CHECK(got.last != ReadStatus::failed);
  // The connection's end: the stream ends (or errors, for the source to reconnect) after every picture.
  REQUIRE(got.frames.size() == want.frames.size());
  for (const auto& [pts, frame] : got.frames) {
    INFO("pts " << pts);
    REQUIRE(want.frames.count(pts));
    CHECK(frame == want.frames.at(pts));
  }
}

TEST_CASE("packets lost in a live stream fail the pictures up to the next keyframe, never a smeared one", "[gpu][nvdec][stream]") {
  REQUIRE(nvdec_unavailable_reason().empty());
  const std::string path = clip("live_320x240.ts");
  auto file_reader = ReaderRegistry::global().open(InputKind::file, path, on_nvdec());
  const Read want = read_all(*file_reader);
  REQUIRE(want.frames.size() == 90);

  OneShotServer server(file_bytes(path), 46, 49);  // inside the fourth picture (a P-picture of the first GOP)
  std::string declined;
  auto reader = open_nvdec_stream_reader(server.url(), on_nvdec(), declined);
  INFO(declined);
  REQUIRE(reader);
  const Read got = read_all(*reader);
  INFO("failed " << got.failed.size() << ", first reason: " << (got.failed.empty() ? "" : got.failed.front()));
  REQUIRE_FALSE(got.failed.empty());
  // The first GOP (15 pictures) is damaged from its fourth picture on: what fails is of that GOP, what comes out
  // of it precedes the damage, and the 75 pictures of the later GOPs all come out.
  INFO("frames out " << got.frames.size());
  CHECK(got.failed.size() <= 15);
  CHECK(got.frames.size() >= 75);
  std::vector<std::int64_t> order;
  for (const auto& [pts, frame] : want.frames) order.push_back(pts);
  const std::int64_t damaged = order[3], next_keyframe = order[15];
  for (const auto& [pts, frame] : got.frames) CHECK((pts < damaged || pts >= next_keyframe));
  for (const auto& [pts, frame] : got.frames) {  // nothing that went out differs from the file's picture
    INFO("pts " << pts);
    REQUIRE(want.frames.count(pts));
    CHECK(frame == want.frames.at(pts));
  }
  // Once a keyframe came, pictures go out again: the last 75 fates are frames.
  REQUIRE(got.fates.size() >= 75);
  for (std::size_t i = got.fates.size() - 75; i < got.fates.size(); ++i) CHECK(got.fates[i]);
}
