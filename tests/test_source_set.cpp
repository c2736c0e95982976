// Sources: multi-source batches, leaky and blocking rings, sources added and removed at run time, live
// reconnection with backoff, the stall watchdog, and resumable directory jobs. Readers for `stream` and
// `file` inputs are fakes registered here (this executable has no media library).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "pipeline_helpers.hpp"
#include "runtime/job_ledger.hpp"
#include "runtime/source_set.hpp"
#include "captured_log.hpp"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

// A stream whose behaviour the URI's host names: "flaky" fails its first open and then delivers 3 frames
// per connection before the "cut"; "dead" never opens; "slow" delivers one frame, then one more after 1.5 s.
class FakeStream final : public FrameReader {
 public:
  explicit FakeStream(std::string uri) {
    info_.uri = std::move(uri);
    info_.kind = InputKind::stream;
  }
  ReadStatus read(const FrameTarget& t, std::string& why) override {
    const bool slow = info_.uri.find("slow") != std::string::npos;
    const bool steady = info_.uri.find("steady") != std::string::npos;
    if (slow && frames_ == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    if (steady) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a camera: endless, paced
    if (!slow && !steady && frames_ == 3) {
      why = "connection reset by peer";
      return ReadStatus::error;
    }
    std::memset(t.data, static_cast<int>(frames_++), image_bytes(t.pixel, t.width, t.height));
    return ReadStatus::frame;
  }
  const InputInfo& info() const override { return info_; }

 private:
  InputInfo info_;
  int frames_ = 0;
};

// A "video file" that is a text file: "N" frames, "corrupt" (cannot be opened) or "truncated N".
class FakeFile final : public FrameReader {
 public:
  FakeFile(std::string uri, std::int64_t frames, bool truncated) : frames_(frames), truncated_(truncated) {
    info_.uri = std::move(uri);
    info_.kind = InputKind::file;
    info_.frames_total = frames;
  }
  ReadStatus read(const FrameTarget& t, std::string& why) override {
    if (next_ == frames_) {
      if (!truncated_) return ReadStatus::end;
      why = "ended after " + std::to_string(next_) + " frames (truncated or corrupt)";
      return ReadStatus::error;
    }
    std::memset(t.data, static_cast<int>(next_), image_bytes(t.pixel, t.width, t.height));
    pts_ns_ = kFakeFileStartNs + next_ * next_ * 1'000'000;  // a container clock whose frames drift apart (VFR)
    ++next_;
    return ReadStatus::frame;
  }
  const InputInfo& info() const override { return info_; }
  std::optional<std::int64_t> pts_ns() const override { return pts_ns_; }
  static constexpr std::int64_t kFakeFileStartNs = 5'000'000'000;

 private:
  InputInfo info_;
  std::optional<std::int64_t> pts_ns_;
  std::int64_t frames_, next_ = 0;
  bool truncated_;
};

std::atomic<int> g_flaky_opens{0};
std::atomic<int> g_steady_opens{0};

// "stuck" streams block in open until released, like a FIFO without a writer or a hung mount.
struct StuckOpens {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  int blocked = 0;
  void release() {
    std::lock_guard lock(mu);
    released = true;
    cv.notify_all();
  }
};
// One latch per URI; never destroyed: an abandoned thread may still wait on one at exit.
StuckOpens& stuck_latch(const std::string& uri) {
  static std::mutex mu;
  static auto* latches = new std::map<std::string, StuckOpens*>;
  std::lock_guard lock(mu);
  StuckOpens*& latch = (*latches)[uri];
  if (!latch) latch = new StuckOpens;
  return *latch;
}

void register_fakes() {
  static const bool once = [] {
    // Only the fakes read: a GPU reader of this machine (NVDEC) must not take their URIs first.
    for (const InputKind kind : {InputKind::stream, InputKind::file})
      ReaderRegistry::global().add_gpu(kind, [](const std::string&, const ReaderOptions&, std::string& why) {
        why = "fake inputs are read by the fakes";
        return std::unique_ptr<FrameReader>();
      });
    ReaderRegistry::global().add(InputKind::stream, [](const std::string& uri, const ReaderOptions&) {
      if (uri.find("dead") != std::string::npos) throw InputError("connection refused");
      if (uri.find("steady") != std::string::npos) g_steady_opens++;
      if (uri.find("stuck") != std::string::npos) {
        StuckOpens& latch = stuck_latch(uri);
        std::unique_lock lock(latch.mu);
        latch.blocked++;
        latch.cv.notify_all();
        latch.cv.wait(lock, [&] { return latch.released; });
        throw InputError("released");
      }
      if (uri.find("flaky") != std::string::npos && g_flaky_opens++ == 0) throw InputError("connection refused");
      return std::unique_ptr<FrameReader>(std::make_unique<FakeStream>(uri));
    });
    ReaderRegistry::global().add(InputKind::file, [](const std::string& uri, const ReaderOptions&) {
      std::ifstream in(uri);
      if (!in) throw InputError("no such file");
      std::string word;
      in >> word;
      if (word == "corrupt") throw InputError("not a video FFmpeg can decode (unsupported or corrupt)");
      const bool truncated = word == "truncated";
      std::int64_t n = 0;
      if (truncated) in >> n;
      else n = std::stoll(word);
      return std::unique_ptr<FrameReader>(std::make_unique<FakeFile>(uri, n, truncated));
    });
    return true;
  }();
  (void)once;
}

struct Harness {
  std::shared_ptr<PipelineShared> shared = std::make_shared<PipelineShared>();
  FrameLedger ledger;
  std::unique_ptr<SourceSet> set;
  PayloadDesc desc;
  std::unique_ptr<BatchPool> pool;
  std::atomic<bool> stop{false};

  explicit Harness(int ring_frames = 4, int batch = 4, int copy_threads = -1) {
    register_fakes();
    SourceSetSettings s;
    s.width = 16;
    s.height = 8;
    s.pixel = PixelFormat::gray8;
    s.ring_frames = ring_frames;
    s.copy_threads = copy_threads;
    s.shared = shared;
    shared->ledger = &ledger;
    set = std::make_unique<SourceSet>(s);
    desc.width = 16;
    desc.height = 8;
    desc.pixel = PixelFormat::gray8;
    desc.batch = batch;
    pool = std::make_unique<BatchPool>("t", desc, 2, false);
  }
  // One batch (possibly empty); the frames count as delivered, as a sink would settle them.
  std::vector<FrameMeta> take_batch(std::int64_t timeout_ns = 2'000'000) {
    BatchLease b = pool->acquire(nullptr);
    set->take(*b, timeout_ns, stop, false);
    shared->inputs.settle(b->frames, FrameFate::delivered);
    return b->frames;
  }
  SourceReport report(std::uint32_t id) const {
    for (const auto& r : set->sources())
      if (r.id == id) return r;
    FAIL("no source " << id);
    return {};
  }
  template <class Pred>
  bool wait_for(Pred pred, double seconds = 10) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < until) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return pred();
  }
};

SourceOptions testsrc(const std::string& pattern, std::uint64_t frames, double fps = 0) {
  SourceOptions o;
  o.uri = "testsrc:" + pattern;
  o.reader.frames = frames;
  o.reader.fps = fps;
  return o;
}

}  // namespace

TEST_CASE("frames of several sources share batches and keep their ids and order", "[sources]") {
  const int copy_threads = GENERATE(0, 2);  // the stage's thread copies, or copy threads do
  INFO("copy threads " << copy_threads);
  Harness h(4, 4, copy_threads);
  const auto a = h.set->add_source(testsrc("bars", 7));
  const auto b = h.set->add_source(testsrc("noise", 5));
  // Both rings full before the first batch (a: its 4 + 1 slots, then it waits; b: all 5), so the batches
  // alternate between them whatever the machine's timing.
  REQUIRE(h.wait_for([&] { return h.report(a).frames == 5 && h.report(b).frames == 5; }));
  std::map<std::uint32_t, std::vector<std::uint64_t>> seen;
  bool mixed = false;
  for (int guard = 0; guard < 1000 && !h.set->exhausted(); ++guard) {
    const auto frames = h.take_batch();
    std::set<std::uint32_t> ids;
    for (const auto& f : frames) {
      seen[f.source_id].push_back(f.input_frame);
      ids.insert(f.source_id);
      CHECK(f.input != 0);
    }
    mixed = mixed || ids.size() > 1;
  }
  REQUIRE(h.set->exhausted());
  CHECK(seen[a] == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6});
  CHECK(seen[b] == std::vector<std::uint64_t>{0, 1, 2, 3, 4});
  CHECK(mixed);
  CHECK(h.report(a).state == SourceState::eos);
  CHECK(h.report(a).frames == 7);
  CHECK(h.shared->inputs.totals().complete == 2);
  CHECK(h.ledger.totals().dropped == 0);
}

// take() under a latency budget. The source sends a frame every 100 ms; a batch of 8 would take 700 ms to fill,
// and the batch timeout is a minute: only the budget can end a batch early. Frame 0's deadline is its capture +
// 150 ms budget - 50 ms downstream, so the batch leaves holding one or two frames (eight only if this thread
// woke 600 ms late).
TEST_CASE("take() leaves with a partial batch at its oldest frame's budget deadline, and waits without a budget",
          "[sources][latency]") {
  constexpr std::int64_t kMinute = 60'000'000'000;
  {
    Harness h(16, 8);
    auto o = testsrc("bars", 8, 10);
    o.latency_budget_ms = 150;
    h.set->add_source(o);
    BatchLease b = h.pool->acquire(nullptr);
    while (b->count == 0) h.set->take(*b, kMinute, h.stop, false, nullptr, nullptr, 50'000'000);
    CHECK(b->count < 8);
    for (const auto& f : b->frames) CHECK(f.budget_ns == 150'000'000);
    h.shared->inputs.settle(b->frames, FrameFate::delivered);
  }
  {
    Harness h(16, 8);
    h.set->add_source(testsrc("bars", 8, 10));  // no budget of its own, none for the set
    BatchLease b = h.pool->acquire(nullptr);
    while (b->count == 0) h.set->take(*b, kMinute, h.stop, false, nullptr, nullptr, 50'000'000);
    CHECK(b->count == 8);  // the full batch (the source ends after 8)
    for (const auto& f : b->frames) CHECK(f.budget_ns == 0);
    h.shared->inputs.settle(b->frames, FrameFate::delivered);
  }
}

TEST_CASE("past its deadline a batch still takes the frames that are ready, and a bad budget is refused",
          "[sources][latency]") {
  Harness h(16, 8);
  auto o = testsrc("bars", 8);  // as fast as it can: all 8 wait in the ring
  o.latency_budget_ms = 1;
  const auto id = h.set->add_source(o);
  REQUIRE(h.wait_for([&] { return h.report(id).frames == 8; }));
  BatchLease b = h.pool->acquire(nullptr);
  // An hour downstream: every deadline is long past, yet nothing ready is left behind.
  h.set->take(*b, 60'000'000'000, h.stop, false, nullptr, nullptr, 3'600'000'000'000);
  CHECK(b->count == 8);
  h.shared->inputs.settle(b->frames, FrameFate::delivered);
  for (const double bad : {-1.0, std::nan(""), 1e300}) {
    auto worse = testsrc("bars", 1);
    worse.latency_budget_ms = bad;
    CHECK_THROWS_WITH(h.set->add_source(worse), Catch::Matchers::Contains("'latency_budget_ms'"));
  }
}

TEST_CASE("frames carry the reader's clock where it has one, else the native rate's", "[sources]") {
  const fs::path dir = fs::temp_directory_path() / ("sluice-clock-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "vfr.mp4") << "6";
  Harness h;
  SourceOptions file;
  file.uri = (dir / "vfr.mp4").string();
  const auto f = h.set->add_source(file);
  const auto t = h.set->add_source(testsrc("bars", 3, 25));
  std::map<std::uint32_t, std::vector<std::int64_t>> pts;
  for (int guard = 0; guard < 1000 && !h.set->exhausted(); ++guard)
    for (const auto& m : h.take_batch()) pts[m.source_id].push_back(m.pts_ns);
  fs::remove_all(dir);
  std::vector<std::int64_t> want;
  for (std::int64_t i = 0; i < 6; ++i) want.push_back(FakeFile::kFakeFileStartNs + i * i * 1'000'000);
  CHECK(pts[f] == want);
  CHECK(pts[t] == std::vector<std::int64_t>{0, 40'000'000, 80'000'000});  // testsrc: no clock, 25 fps
}

TEST_CASE("copy threads put every frame's own pixels in its batch slot", "[sources]") {
  const fs::path dir = fs::temp_directory_path() / ("sluice-copies-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a.mp4") << "40";
  std::ofstream(dir / "b.mp4") << "25";
  Harness h(3, 4, 2);
  for (const char* name : {"a.mp4", "b.mp4"}) {
    SourceOptions o;
    o.uri = (dir / name).string();
    h.set->add_source(o);
  }
  std::size_t frames = 0;
  for (int guard = 0; guard < 1000 && !h.set->exhausted(); ++guard) {
    BatchLease b = h.pool->acquire(nullptr);
    h.set->take(*b, 2'000'000, h.stop, false);
    for (int i = 0; i < b->count; ++i) {
      const auto* px = reinterpret_cast<const std::uint8_t*>(b->item(i));
      const auto want = static_cast<std::uint8_t>(b->frames[static_cast<std::size_t>(i)].input_frame);  // FakeFile fills frame n with n
      const std::size_t bytes = b->desc.item_bytes();
      REQUIRE(std::count(px, px + bytes, want) == static_cast<std::ptrdiff_t>(bytes));
    }
    h.shared->inputs.settle(b->frames, FrameFate::delivered);
    frames += static_cast<std::size_t>(b->count);
  }
  CHECK(frames == 65);
  fs::remove_all(dir);
}

TEST_CASE("a leaky source drops its oldest frames when the pipeline is behind and counts them", "[sources]") {
  Harness h(2);
  SourceOptions o = testsrc("bars", 50);
  o.leaky = true;
  const auto id = h.set->add_source(o);
  REQUIRE(h.wait_for([&] { return h.report(id).state == SourceState::eos; }));
  std::vector<std::uint64_t> taken;
  while (!h.set->exhausted())
    for (const auto& f : h.take_batch()) taken.push_back(f.input_frame);
  const auto r = h.report(id);
  CHECK(r.dropped > 0);
  CHECK(taken.size() + r.dropped == 50);
  CHECK(taken.back() == 49);  // the newest frames survive
  CHECK(h.ledger.totals().dropped == r.dropped);
  CHECK(h.ledger.totals().produced == r.dropped);  // the runner counts the taken ones when they leave in a batch
  CHECK(h.shared->inputs.totals().complete == 1);
}

TEST_CASE("a blocking source waits for the pipeline and loses nothing", "[sources]") {
  Harness h(2);
  const auto id = h.set->add_source(testsrc("bars", 50));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the ring fills; the source must wait
  CHECK(h.report(id).state == SourceState::live);
  std::size_t taken = 0;
  while (!h.set->exhausted()) taken += h.take_batch().size();
  CHECK(taken == 50);
  CHECK(h.report(id).dropped == 0);
}

TEST_CASE("sources are added and removed while another keeps running", "[sources]") {
  Harness h;
  const auto endless = h.set->add_source(testsrc("bars", 0, 400));
  std::map<std::uint32_t, std::size_t> counts;
  auto take_some = [&](int batches) {
    for (int i = 0; i < batches; ++i)
      for (const auto& f : h.take_batch()) counts[f.source_id]++;
  };
  take_some(5);
  const auto added = h.set->add_source(testsrc("shapes", 20));
  REQUIRE(h.wait_for([&] {
    take_some(1);
    return counts[added] == 20;
  }));
  CHECK(counts[endless] > 0);
  const auto before = counts[endless];
  take_some(3);
  CHECK(counts[endless] > before);  // the first source never stopped
  CHECK(h.set->remove_source(std::to_string(endless)));
  CHECK_FALSE(h.set->remove_source("no-such-source"));
  // Its decoded frames still come out; then nothing is left and the set is exhausted.
  REQUIRE(h.wait_for([&] {
    take_some(1);
    return h.set->exhausted();
  }));
  REQUIRE(h.wait_for([&] { return h.set->sources().size() == 1; }));  // the removed one is forgotten
  CHECK(h.set->sources().front().id == added);
  CHECK(h.ledger.totals().dropped == 0);
}

TEST_CASE("a source removed at run time leaves its input marked removed, not failed", "[sources]") {
  Harness h;
  const auto endless = h.set->add_source(testsrc("bars", 0, 400));
  REQUIRE(h.wait_for([&] { return !h.take_batch().empty(); }));
  REQUIRE(h.set->remove_source(std::to_string(endless)));
  CHECK(h.report(endless).state == SourceState::removed);
  REQUIRE(h.wait_for([&] {
    h.take_batch();
    return h.set->exhausted();
  }));
  const auto inputs = h.shared->inputs.snapshot();
  REQUIRE(inputs.size() == 1);
  CHECK(inputs[0].complete);
  CHECK(inputs[0].interrupted);
  CHECK(inputs[0].removed);
  CHECK(h.shared->inputs.totals().with_errors == 0);
}

TEST_CASE("rate_limit paces a directory job as one source, not each of its files", "[sources][job]") {
  register_fakes();
  const fs::path dir = fs::temp_directory_path() / ("sluice-rate-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* name : {"a.mp4", "b.mp4"}) std::ofstream(dir / name) << "10";
  Harness h;
  SourceOptions o;
  o.uri = dir.string();
  o.decode_threads = 2;  // both files at once
  o.rate_limit = 40;
  const auto id = h.set->add_source(o);
  std::vector<FrameMeta> frames;
  REQUIRE(h.wait_for([&] {
    for (const auto& f : h.take_batch()) frames.push_back(f);
    return h.set->exhausted();
  }));
  REQUIRE(frames.size() == 20);
  CHECK(h.report(id).dropped == 0);  // files are paced, never dropped
  // 20 frames at 40/s of the source: each frame is due a period after the one before, so the first and the
  // last lie 19 periods apart, less the first one's read time (18 allowed); paced per file, the two files
  // together took about 9.
  std::vector<std::int64_t> captured;
  for (const auto& f : frames) captured.push_back(f.capture_ns);
  std::sort(captured.begin(), captured.end());
  CHECK(captured.back() - captured.front() >= 18 * 1'000'000'000LL / 40);
  fs::remove_all(dir);
}

TEST_CASE("a live source reconnects with backoff after its stream is cut", "[sources]") {
  Harness h;
  g_flaky_opens = 0;
  SourceOptions o;
  o.uri = "tcp://flaky:9";
  o.backoff_initial_s = 0.01;
  o.backoff_max_s = 0.05;
  const auto id = h.set->add_source(o);
  std::size_t frames = 0;
  REQUIRE(h.wait_for([&] {
    frames += h.take_batch().size();
    return frames >= 9;
  }));
  const auto r = h.report(id);
  CHECK(r.reconnects >= 3);  // one refused open, then a cut after every 3 frames
  CHECK(r.errors >= 3);
  CHECK(r.leaky);
  CHECK_FALSE(r.reason.empty());
  h.set->remove_source(std::to_string(id));
}

TEST_CASE("a source that recovers after a cut logs one line saying so, with how long it was down", "[sources]") {
  sluice::test::CapturedLog log;
  Harness h;
  g_flaky_opens = 0;
  SourceOptions o;
  o.uri = "tcp://flaky:10";
  o.backoff_initial_s = 0.01;
  o.backoff_max_s = 0.05;
  const auto id = h.set->add_source(o);
  std::size_t frames = 0;
  REQUIRE(h.wait_for([&] {  // a refused open, 3 frames, a cut, 3 frames
    frames += h.take_batch().size();
    return frames >= 6;
  }));
  h.set->remove_source(std::to_string(id));
  const auto recovered = log.lines_with("recovered");
  REQUIRE(recovered.size() >= 2);  // after the refused open and after the cut: one line each
  CHECK(recovered[0].find("source 'flaky") != std::string::npos);
  CHECK(recovered[0].find(" s down") != std::string::npos);
  CHECK(recovered[0].find("connection refused") != std::string::npos);  // what took it down
  CHECK(recovered[1].find("connection reset by peer") != std::string::npos);
}

TEST_CASE("a live source's pts go on across reconnections instead of starting at 0 again", "[sources]") {
  Harness h;
  g_flaky_opens = 0;
  SourceOptions o;
  o.uri = "tcp://flaky:11";  // 3 frames per connection, their clock from 0 each time
  o.backoff_initial_s = 0.01;
  o.backoff_max_s = 0.05;
  const auto id = h.set->add_source(o);
  std::vector<FrameMeta> frames;
  REQUIRE(h.wait_for([&] {
    for (const auto& f : h.take_batch()) frames.push_back(f);
    return frames.size() >= 9;  // three connections
  }));
  h.set->remove_source(std::to_string(id));
  for (std::size_t i = 1; i < frames.size(); ++i) {
    INFO("frame " << i);
    CHECK(frames[i].pts_ns > frames[i - 1].pts_ns);
    CHECK(frames[i].wall_ns >= frames[i - 1].wall_ns);
  }
}

TEST_CASE("a live source that never connects fails after max_attempts", "[sources]") {
  Harness h;
  SourceOptions o;
  o.uri = "rtsp://dead/stream";
  o.backoff_initial_s = 0.01;
  o.backoff_max_s = 0.02;
  o.max_attempts = 3;
  const auto id = h.set->add_source(o);
  REQUIRE(h.wait_for([&] { return h.report(id).state == SourceState::failed; }));
  const auto r = h.report(id);
  CHECK(r.reason.find("connection refused") != std::string::npos);
  CHECK(r.reason.find("gave up after 3") != std::string::npos);
  CHECK(r.reconnects == 3);
  // Its thread ends just after it reports failed: then nothing is left to run.
  CHECK(h.wait_for([&] { return h.set->exhausted(); }));
}

TEST_CASE("a live source without frames is reported stalled and live again when they come", "[sources]") {
  Harness h;
  SourceOptions o;
  o.uri = "udp://slow:1234";
  o.stall_timeout_s = 0.3;
  const auto id = h.set->add_source(o);
  REQUIRE(h.wait_for([&] { return h.report(id).frames >= 1; }));
  REQUIRE(h.wait_for([&] { return h.report(id).state == SourceState::stalled; }, 1.4));
  CHECK(h.report(id).reason.find("no frame for") != std::string::npos);
  REQUIRE(h.wait_for([&] { return h.report(id).frames >= 2; }));
  CHECK(h.report(id).state != SourceState::stalled);
  h.set->remove_source(std::to_string(id));
}

TEST_CASE("a directory job processes every file once and resumes after a restart", "[sources][job]") {
  register_fakes();
  const fs::path root = fs::temp_directory_path() / ("sluice-job-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "in");
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(root / "in" / name) << text; };
  write("a.mp4", "3");
  write("b.mp4", "4");
  write("c.mp4", "truncated 2");
  write("d.mp4", "corrupt");
  write("notes.txt", "ignored: not a media file");
  const std::string yaml = "name: job\nbatch_size: 4\nstages:\n  - kind: decode\n    uri: [" + (root / "in").string() +
                           "]\n    width: 16\n    height: 16\n    format: gray8\n    state_dir: " + (root / "state").string() +
                           "\n  - kind: sink\n    type: null\n";
  auto run = [&] {
    PipelineSnapshot snap;
    const auto totals = test::run_to_end(test::plan_from(yaml), &snap);
    CHECK(totals.in_flight() == 0);
    return totals.produced;
  };
  CHECK(run() == 3 + 4 + 2);
  const fs::path ledger_file = job_ledger_path(root / "state", "test", {(root / "in").string()});
  {
    JobLedger ledger(ledger_file);
    CHECK(ledger.finished((root / "in" / "a.mp4").string()));
    CHECK(ledger.finished((root / "in" / "c.mp4").string()));  // failed (truncated): not retried
    CHECK(ledger.finished((root / "in" / "d.mp4").string()));
    CHECK(ledger.finished_count() == 4);
  }
  CHECK(run() == 0);  // everything finished in the first run
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write("a.mp4", "5");  // changed since: done again
  CHECK(run() == 5);
  fs::remove_all(root);
}

TEST_CASE("a directory job with a tee: an input is done once every branch's sink finished it", "[sources][job][tee]") {
  register_fakes();
  const fs::path root = fs::temp_directory_path() / ("sluice-tee-job-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "in");
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(root / "in" / name) << text; };
  write("a.mp4", "3");
  write("b.mp4", "4");
  write("c.mp4", "truncated 2");
  write("d.mp4", "corrupt");
  std::ofstream(root / "not-a-dir") << "x";
  // Two per-input sinks: a directory of results and jsonl per file; `second` is where the jsonl one writes.
  auto yaml = [&](const fs::path& second) {
    return "name: job\nbatch_size: 4\nstages:\n  - kind: decode\n    uri: [" + (root / "in").string() +
           "]\n    width: 16\n    height: 16\n    format: gray8\n    state_dir: " + (root / "state").string() +
           "\n  - kind: tee\n    branches:\n"
           "      - - kind: sink\n          name: results\n          type: directory\n          path: " + (root / "results").string() +
           "\n      - - kind: sink\n          name: records\n          type: jsonl\n          per: file\n          write_retry_s: 0.01\n"
           "          path: " + second.string() + "\n";
  };
  const fs::path ledger_file = job_ledger_path(root / "state", "test", {(root / "in").string()});
  auto ledger_records = [&] {
    std::map<std::string, nlohmann::json> out;  // by input file name
    for (const auto& j : test::read_jsonl(ledger_file.string()))
      if (j.contains("outputs")) out[fs::path(j.at("input").get<std::string>()).filename().string()] = j;
    return out;
  };

  SECTION("a branch that cannot write: its inputs are not done, a restart does them again") {
    const auto t = test::run_to_end(test::plan_from(yaml(root / "not-a-dir" / "records")));
    CHECK(t.produced == 3 + 4 + 2);
    CHECK(t.in_flight() == 0);
    CHECK(t.delivered == 0);  // every frame failed in the records branch, though the results branch wrote it
    CHECK(t.failed == 9);
    JobLedger ledger(ledger_file);
    CHECK_FALSE(ledger.finished((root / "in" / "a.mp4").string()));
    CHECK_FALSE(ledger.finished((root / "in" / "b.mp4").string()));
    // Not even the inputs that failed on their own: the records sink committed no output for them (as without
    // a tee, an input a sink could not finish is left for the next run).
    CHECK_FALSE(ledger.finished((root / "in" / "c.mp4").string()));
    CHECK_FALSE(ledger.finished((root / "in" / "d.mp4").string()));
    CHECK(ledger.finished_count() == 0);
  }
  SECTION("both branches write: every input is recorded once with both sinks' outputs") {
    const auto t = test::run_to_end(test::plan_from(yaml(root / "records")));
    CHECK(t.produced == 3 + 4 + 2);
    CHECK(t.delivered == 3 + 4 + 2);
    CHECK(t.in_flight() == 0);
    const auto records = ledger_records();
    REQUIRE(records.count("a.mp4"));
    REQUIRE(records.count("b.mp4"));
    for (const char* name : {"a.mp4", "b.mp4"}) {
      INFO(name);
      const auto& r = records.at(name);
      CHECK(r.at("frames") == (std::string(name) == "a.mp4" ? 3 : 4));
      std::set<std::string> outputs;
      for (const auto& o : r.at("outputs")) outputs.insert(fs::path(o.get<std::string>()).parent_path().filename().string());
      CHECK(outputs == std::set<std::string>{"results", "records"});  // one file from each sink
      for (const auto& o : r.at("outputs")) CHECK(fs::is_regular_file(o.get<std::string>()));
    }
    CHECK(test::read_jsonl((root / "records" / "b.jsonl").string()).size() == 4);
    CHECK(test::run_to_end(test::plan_from(yaml(root / "records"))).produced == 0);  // all finished: nothing redone
  }
  fs::remove_all(root);
}

TEST_CASE("a source stuck in a blocking open does not hold a stop up: it is reported failed", "[sources][stop]") {
  Harness h;
  SourceOptions o;
  o.uri = "rtsp://stuck/set";
  const auto stuck = h.set->add_source(o);
  const auto fine = h.set->add_source(testsrc("bars", 0, 200));
  StuckOpens& latch = stuck_latch(o.uri);
  {
    std::unique_lock lock(latch.mu);
    REQUIRE(latch.cv.wait_for(lock, std::chrono::seconds(10), [&] { return latch.blocked >= 1; }));
  }
  CHECK_FALSE(h.set->stop_within(std::chrono::milliseconds(1000)));  // long enough for the others, even on a loaded machine
  const SourceReport r = h.report(stuck);
  CHECK(r.state == SourceState::failed);
  CHECK(r.reason.find("did not stop within") != std::string::npos);
  CHECK(h.report(fine).state != SourceState::failed);  // it stopped in time
  // Once the open returns, the thread ends and the set can go as usual.
  latch.release();
  REQUIRE(h.wait_for([&] { return h.set->stop_within(std::chrono::milliseconds(10)); }));
}

TEST_CASE("a pipeline whose source is stuck in open stops within stop_timeout_s, frames accounted", "[sources][stop]") {
  register_fakes();
  const std::string yaml =
      "name: stuck\nbatch_size: 4\nstages:\n  - kind: decode\n    uri: [\"rtsp://stuck/pipeline\", \"testsrc:bars\"]\n"
      "    width: 16\n    height: 16\n    format: gray8\n    fps: 200\n    stop_timeout_s: 0.2\n"
      "  - kind: sink\n    type: null\n";
  auto p = std::make_unique<Pipeline>(test::plan_from(yaml));
  p->start();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (p->ledger().totals().delivered < 8 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  p->request_stop();
  p->wait();  // before stop_timeout_s existed this waited for the stuck open forever
  const auto t = p->ledger().totals();
  CHECK(t.delivered >= 8);
  CHECK(t.in_flight() == 0);
  bool stuck_failed = false;
  for (const auto& r : p->source_control()->sources())
    if (r.uri == "rtsp://stuck/pipeline")
      stuck_failed = r.state == SourceState::failed && r.reason.find("did not stop within") != std::string::npos;
  CHECK(stuck_failed);
}

TEST_CASE("the decode stage lists the sources added at run time and not removed, as asked for", "[sources]") {
  register_fakes();
  const std::string yaml =
      "name: added\nbatch_size: 4\nstages:\n  - kind: decode\n    idle: wait\n"
      "    width: 16\n    height: 16\n    format: gray8\n    fps: 100\n  - kind: sink\n    type: null\n";
  Pipeline p(test::plan_from(yaml));
  p.start();
  SourceControl& control = *p.source_control();
  SourceOptions a;
  a.uri = "testsrc:bars";
  a.name = "kept";
  a.rate_limit = 25;
  SourceOptions b;
  b.uri = "testsrc:noise";
  control.add_source(a);
  const auto removed = control.add_source(b);
  REQUIRE(control.remove_source(std::to_string(removed)));
  const auto added = control.added_at_run_time();
  REQUIRE(added.size() == 1);
  CHECK(added[0].uri == "testsrc:bars");
  CHECK(added[0].name == "kept");
  CHECK(added[0].rate_limit == 25);
  p.request_stop();
  p.wait();
  CHECK(p.ledger().totals().in_flight() == 0);
}

namespace {
std::string handover_yaml(int width, double fps) {
  return "name: handover\nbatch_size: 4\nbatch_timeout_ms: 5\nstages:\n  - kind: decode\n"
         "    uri: [\"rtsp://steady/cam\", \"testsrc:bars\"]\n    idle: wait\n    width: " + std::to_string(width) +
         "\n    height: 16\n    format: gray8\n    fps: " + std::to_string(fps) + "\n  - kind: sink\n    type: null\n";
}
std::map<std::string, SourceReport> by_uri(const Pipeline& p) {
  std::map<std::string, SourceReport> out;
  for (const auto& r : p.source_control()->sources())
    if (r.state != SourceState::removed) out[r.uri] = r;
  return out;
}
bool wait_until(const std::function<bool()>& pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!pred() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return pred();
}
}  // namespace

TEST_CASE("a reload hands running streams and run-time sources to the new pipeline without reconnecting",
          "[sources][reload]") {
  register_fakes();
  auto old = std::make_unique<Pipeline>(test::plan_from(handover_yaml(16, 200)));
  old->start();
  SourceOptions extra;
  extra.uri = "testsrc:noise";
  extra.name = "extra";
  old->source_control()->add_source(extra);
  REQUIRE(wait_until([&] { return old->ledger().totals().delivered >= 20 && by_uri(*old).count("testsrc:noise"); }));
  const auto before = by_uri(*old);
  const int opens = g_steady_opens.load();

  // Unchanged file: everything goes on.
  auto next = std::make_unique<Pipeline>(test::plan_from(handover_yaml(16, 200)));
  REQUIRE(old->source_control()->hand_over_to(*next->source_control()));
  old->request_stop();
  old->wait();
  const auto old_totals = old->ledger().totals();
  CHECK(old_totals.in_flight() == 0);
  old.reset();
  next->start();
  const std::uint64_t delivered_at_start = next->ledger().totals().delivered;
  REQUIRE(wait_until([&] { return next->ledger().totals().delivered > delivered_at_start + 20; }));
  auto after = by_uri(*next);
  for (const char* name : {"rtsp://steady/cam", "testsrc:bars", "testsrc:noise"}) {
    INFO(name);
    REQUIRE(after.count(name));
    CHECK(after[name].id == before.at(name).id);  // the same source, not a new one
    CHECK(after[name].reconnects == 0);
    CHECK(after[name].frames > before.at(name).frames);
  }
  CHECK(g_steady_opens.load() == opens);  // the stream was not opened again
  REQUIRE(next->source_control()->added_at_run_time().size() == 1);

  // Changed settings (another rate): the streams of the file start again, the run-time source goes on.
  auto changed = std::make_unique<Pipeline>(test::plan_from(handover_yaml(16, 150)));
  REQUIRE(next->source_control()->hand_over_to(*changed->source_control()));
  next->request_stop();
  next->wait();
  CHECK(next->ledger().totals().in_flight() == 0);
  next.reset();
  changed->start();
  REQUIRE(wait_until([&] { return by_uri(*changed).count("rtsp://steady/cam") && by_uri(*changed).at("rtsp://steady/cam").frames > 0; }));
  after = by_uri(*changed);
  CHECK(after.at("rtsp://steady/cam").id != before.at("rtsp://steady/cam").id);
  CHECK(after.at("testsrc:noise").id == before.at("testsrc:noise").id);
  CHECK(g_steady_opens.load() == opens + 1);

  // Another frame size: no hand-over (the caller stops the old sources as usual).
  auto other = std::make_unique<Pipeline>(test::plan_from(handover_yaml(32, 150)));
  CHECK_FALSE(changed->source_control()->hand_over_to(*other->source_control()));
  changed->request_stop();
  changed->wait();
  CHECK(changed->ledger().totals().in_flight() == 0);
}
