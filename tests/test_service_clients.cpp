// The service in-process, with control clients on several threads at once while the pipeline streams: status,
// sources, version, source-add/remove, pause/resume, reloads (whose old generation drains off the control
// thread) and lines that are not requests. Under ThreadSanitizer (the tsan preset) a race between the control
// thread, the pipeline's threads and a draining generation fails it; in every build it checks that each request
// got exactly one reply, that the daemon stops cleanly when asked, and that the frame ledger holds.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/service.hpp"
#include "temp_dir.hpp"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

// One request line over a fresh UNIX connection; the reply (one JSON line), or nullopt when none came within
// 20 s or the daemon is not listening.
std::optional<nlohmann::json> ask(const std::string& socket_path, const std::string& line) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
  timeval tv{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::optional<nlohmann::json> reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string out = line + "\n";
    if (::send(fd, out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size())) {
      std::string in;
      char buf[4096];
      ssize_t n;
      while (in.find('\n') == std::string::npos && (n = ::recv(fd, buf, sizeof buf, 0)) > 0) in.append(buf, n);
      if (auto nl = in.find('\n'); nl != std::string::npos) {
        auto j = nlohmann::json::parse(in.substr(0, nl), nullptr, false);
        if (!j.is_discarded()) reply = std::move(j);
      }
    }
  }
  ::close(fd);
  return reply;
}

std::string request(const nlohmann::json& j) { return j.dump(); }

}  // namespace

TEST_CASE("control clients on many threads while the service streams, reloads and drains", "[service][concurrency]") {
  test::TempDir dir;
  const fs::path config = dir.path / "clients.yaml";
  std::ofstream(config) << R"(name: clients
device: cpu
batch_size: 4
batch_timeout_ms: 5
stages:
  - kind: decode
    uri: [testsrc:bars, testsrc:gradient]
    width: 32
    height: 24
    fps: 200
  - kind: upload
  - kind: preprocess
    width: 16
    height: 16
  - kind: download
  - kind: sink
    type: "null"
)";
  ServiceOptions options;
  options.config = config.string();
  options.socket = (dir.path / "control.sock").string();
  options.drain_timeout_s = 10;
  options.state_dir = (dir.path / "state").string();
  std::future<int> service = std::async(std::launch::async, [&] { return run_service(options); });

  const std::string sock = options.socket;
  bool running = false;
  for (int i = 0; i < 400 && !running; ++i) {
    if (service.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready) break;
    const auto r = ask(sock, R"({"request":"status"})");
    running = r && r->value("state", "") == "running";
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(running);

  // Each client thread sends its own mix; every request must be answered (ok or a clear error).
  const std::vector<std::string> lines = {
      request({{"request", "status"}}),
      request({{"request", "sources"}}),
      request({{"request", "version"}}),
      request({{"request", "pause"}}),
      request({{"request", "resume"}}),
      request({{"request", "reload"}}),
      "\xff",
      R"({"request":"trace","seconds":1e999})",
      R"({"request":"status","x":-1e400})",
      "[1,2,3]",
  };
  constexpr int kClients = 4, kRequests = 30;
  // A source-add that lands while a reload's old generation drains is refused with that reason (the caller
  // tries again); in a fast build reloads come so often that every one may land there, so the storm only
  // checks the reason, and one add after it must succeed.
  std::atomic<int> answered{0}, unanswered{0}, add_refused_otherwise{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(static_cast<unsigned>(c + 1));
      for (int i = 0; i < kRequests; ++i) {
        std::string line = lines[rng() % lines.size()];
        const std::string name = "extra-" + std::to_string(c) + "-" + std::to_string(i);
        if (i % 7 == 3) line = request({{"request", "source-add"}, {"uri", "testsrc:checkerboard"}, {"name", name}});
        if (i % 7 == 5) line = request({{"request", "source-remove"}, {"source", "extra-" + std::to_string(c) + "-" +
                                                                                   std::to_string(i - 2)}});
        const auto r = ask(sock, line);
        if (!r || !r->is_object() || !r->contains("ok")) {
          ++unanswered;
          continue;
        }
        ++answered;
        if (i % 7 == 3 && !r->value("ok", false) &&
            r->value("error", "").find("a reload is in progress") == std::string::npos)
          ++add_refused_otherwise;
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK(unanswered.load() == 0);
  CHECK(answered.load() == kClients * kRequests);
  CHECK(add_refused_otherwise.load() == 0);

  // Let a draining generation finish, then read the ledger and stop.
  std::optional<nlohmann::json> status;
  for (int i = 0; i < 400; ++i) {
    ask(sock, R"({"request":"resume"})");
    status = ask(sock, R"({"request":"status"})");
    if (status && status->value("state", "") == "running" && (*status)["draining"].is_null()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(status);
  const auto added = ask(sock, request({{"request", "source-add"}, {"uri", "testsrc:checkerboard"}, {"name", "late"}}));
  REQUIRE(added);
  CHECK(added->value("ok", false));
  const auto sources = ask(sock, R"({"request":"sources"})");
  REQUIRE(sources);
  bool listed = false;
  for (const auto& source : sources->value("sources", nlohmann::json::array())) listed |= source.value("name", "") == "late";
  CHECK(listed);
  const auto& f = (*status)["frames"];  // this generation; the ones the reloads replaced are summed apart
  CHECK(f["produced"].get<std::uint64_t>() + (*status)["frames_before_reload"]["produced"].get<std::uint64_t>() > 0);
  CHECK(f["produced"].get<std::uint64_t>() == f["delivered"].get<std::uint64_t>() + f["dropped"].get<std::uint64_t>() +
                                                 f["failed"].get<std::uint64_t>() + f["in_flight"].get<std::uint64_t>());
  const auto stop = ask(sock, R"({"request":"stop"})");
  REQUIRE(stop);
  CHECK(stop->value("ok", false));
  REQUIRE(service.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  CHECK(service.get() == 0);
  CHECK_FALSE(fs::exists(sock));
}
