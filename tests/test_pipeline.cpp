#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "kernels/preprocess_cpu.hpp"
#include "pipeline_helpers.hpp"
#include "runtime/source_control.hpp"
#include "stages/testsrc.hpp"

using namespace sluice;
using namespace sluice::test;
using Catch::Matchers::Contains;

namespace {

const char* kSmall = R"(name: small
device: cpu
execution: EXEC
batch_size: 8
stages:
  - kind: decode
    pattern: checkerboard
    width: 64
    height: 48
    frames: FRAMES
  - kind: upload
  - kind: preprocess
    width: 32
    height: 32
  - kind: download
  - kind: sink
    type: "null"
)";

std::string small(const std::string& exec, int frames) {
  std::string s = kSmall;
  s.replace(s.find("EXEC"), 4, exec);
  s.replace(s.find("FRAMES"), 6, std::to_string(frames));
  return s;
}

// A source the test steers call by call: `script(call, ctx)` makes batch number `call` (from 1).
class ScriptedSource final : public Stage {
 public:
  using Script = std::function<BatchLease(int call, StageContext& ctx)>;
  ScriptedSource(PayloadDesc d, Script script) : desc_(d), script_(std::move(script)) {}
  PayloadDesc output() const override { return desc_; }
  BatchLease process(Batch*, StageContext& ctx) override { return script_(++calls, ctx); }
  std::atomic<int> calls{0};

 private:
  PayloadDesc desc_;
  Script script_;
};

BatchLease one_frame(StageContext& ctx, std::uint64_t sequence) {
  BatchLease b = ctx.acquire();
  std::memset(b->item(0), 0, b->desc.item_bytes());
  FrameMeta f;
  f.sequence = sequence;
  f.capture_ns = now_ns();
  b->frames.push_back(f);
  b->count = 1;
  return b;
}

// Polls `done` for up to a minute (a liveness bound for a loaded sanitizer build, not a speed check).
bool eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 60'000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

// small() with a jsonl sink and `source` in place of the test pattern; returns the pipeline, not started.
std::unique_ptr<Pipeline> with_source(ScriptedSource::Script script, const std::string& jsonl, ScriptedSource** source) {
  std::string yaml = small("pipelined", 0);
  std::remove(jsonl.c_str());
  yaml.replace(yaml.find("type: \"null\""), 12, "type: jsonl\n    path: " + jsonl);
  PipelinePlan plan = plan_from(yaml);
  auto s = std::make_unique<ScriptedSource>(plan.stages[0].output, std::move(script));
  *source = s.get();
  plan.stages[0].stage = std::move(s);
  return std::make_unique<Pipeline>(std::move(plan));
}

}  // namespace

TEST_CASE("CPU pipeline delivers every frame - pipelined and serial", "[pipeline]") {
  for (const char* exec : {"pipelined", "serial"}) {
    INFO(exec);
    PipelineSnapshot snap;
    auto t = run_to_end(plan_from(small(exec, 100)), &snap);
    REQUIRE(t.produced == 100);
    REQUIRE(t.delivered == 100);
    REQUIRE(t.dropped == 0);
    REQUIRE(t.failed == 0);
    REQUIRE(snap.stages.size() == 5);
    for (const auto& st : snap.stages) {
      REQUIRE(st.frames == 100);
      REQUIRE(st.batches == 13);  // 12 full batches of 8 and one of 4
      REQUIRE(st.errors == 0);
    }
    REQUIRE(snap.latency_p50_ns > 0);
    REQUIRE(snap.latency_p99_ns >= snap.latency_p50_ns);
  }
}

TEST_CASE("stopping an endless source drains frames in flight", "[pipeline]") {
  Pipeline p(plan_from(small("pipelined", 0)));
  p.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  p.request_stop();
  p.wait();
  auto t = p.ledger().totals();
  REQUIRE(t.produced > 0);
  REQUIRE(t.delivered == t.produced);
  REQUIRE(t.in_flight() == 0);
}

TEST_CASE("the directly rendered test pattern reports its frame rate in the sources view", "[pipeline][sources]") {
  std::string yaml = small("pipelined", 0);
  yaml.replace(yaml.find("frames: 0"), 9, "frames: 0\n    fps: 50");
  Pipeline p(plan_from(yaml));
  REQUIRE(p.source_control());
  p.start();
  SourceReport seen;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {  // the first rate comes after a window of about a second
    seen = p.source_control()->sources().at(0);
    if (seen.fps > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  p.request_stop();
  p.wait();
  CHECK(seen.state == SourceState::live);
  CHECK(seen.frames > 0);
  CHECK(seen.fps > 0);
  CHECK(seen.since_last_frame_s >= 0);
  CHECK(p.source_control()->sources().at(0).fps == 0);  // ended: no rate any more
}

TEST_CASE("jsonl sink writes every frame - in order - with what the chain computed", "[pipeline]") {
  const std::string path = "test_pipeline_chain.jsonl";
  for (const char* format : {"bgr8", "nv12"}) {
    INFO(format);
    const std::string before = format_utc_ms(wall_ns() - 1'000'000);  // the ms before, rounded down
    auto t = run_to_end(plan_from(chain_yaml("cpu", format, 21, path)));
    const std::string after = format_utc_ms(wall_ns() + 1'000'000);
    REQUIRE(t.delivered == 21);
    auto lines = read_jsonl(path);
    REQUIRE(lines.size() == 21);
    std::string previous_time;
    for (const auto& j : lines) {  // RFC 3339 UTC with ms, taken at decode: in the run, in frame order
      const std::string time = j.at("time");
      REQUIRE(time.size() == 24);
      CHECK(time[10] == 'T');
      CHECK(time.back() == 'Z');
      CHECK(time >= before);  // same fixed-width form: compares as time does
      CHECK(time <= after);
      CHECK(time >= previous_time);
      previous_time = time;
    }

    // Recompute frame k independently and compare the payload summary the sink wrote.
    const auto fmt = *parse_pixel_format(format);
    TestPatternRenderer render(TestPattern::shapes, fmt, 320, 240, 1);
    std::vector<std::byte> frame(image_bytes(fmt, 320, 240));
    kernels::PreprocessParams pp;
    pp.in_format = fmt;
    pp.in_width = 320;
    pp.in_height = 240;
    pp.out_width = 96;
    pp.out_height = 64;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    for (int c = 0; c < 3; ++c) {
      pp.mean[c] = mean[c];
      pp.std[c] = stdv[c];
    }
    std::vector<float> tensor(3 * 96 * 64);
    for (std::size_t k = 0; k < lines.size(); ++k) {
      const auto& j = lines[k];
      REQUIRE(j["sequence"].get<std::uint64_t>() == k);
      REQUIRE(j["source"].get<int>() == 0);
      REQUIRE(j["stage_ms"].contains("preprocess"));
      REQUIRE(j["payload"]["shape"] == "tensor f32 nchw 3x64x96");
      render.render(k, frame.data());
      kernels::preprocess_cpu(pp, reinterpret_cast<const std::uint8_t*>(frame.data()), tensor.data());
      double sum = 0;
      for (float v : tensor) sum += v;
      REQUIRE(j["payload"]["mean"].get<double>() == Approx(sum / static_cast<double>(tensor.size())).epsilon(1e-9));
    }
  }
  std::remove(path.c_str());
}

TEST_CASE("the run's summary counts frames per source", "[pipeline][sources]") {
  PipelineSnapshot snap;
  const auto totals = run_to_end(plan_from(R"(name: two
device: cpu
batch_size: 4
stages:
  - kind: decode
    uri: [testsrc:bars, testsrc:shapes]
    width: 32
    height: 32
    frames: 12
  - kind: sink
    type: null
)"),
                                 &snap);
  REQUIRE(totals.delivered == 24);
  REQUIRE(snap.frames.sources.size() == 2);
  for (const auto& [id, n] : snap.frames.sources) {
    INFO("source " << id);
    CHECK(n.produced == 12);
    CHECK(n.delivered == 12);
    CHECK(n.dropped + n.failed + n.in_flight() == 0);
  }
  const std::string summary = format_summary(snap);
  INFO(summary);
  CHECK(summary.find("produced  delivered") != std::string::npos);
  CHECK(summary.find("testsrc-bars") != std::string::npos);
  CHECK(summary.find("testsrc-shapes") != std::string::npos);
}

TEST_CASE("record times are RFC 3339 UTC with milliseconds", "[pipeline]") {
  CHECK(format_utc_ms(0) == "1970-01-01T00:00:00.000Z");
  CHECK(format_utc_ms(1'764'637'384'123'456'789LL) == "2025-12-02T01:03:04.123Z");
  CHECK(format_utc_ms(-1) == "1969-12-31T23:59:59.999Z");
}

TEST_CASE("a sink that cannot write fails every frame with a clear error - counts intact", "[pipeline]") {
  auto t = run_to_end(plan_from(chain_yaml("cpu", "bgr8", 30, "/nonexistent-dir/out.jsonl")));
  REQUIRE(t.produced == 30);
  REQUIRE(t.delivered == 0);
  REQUIRE(t.failed == 30);
  REQUIRE(t.in_flight() == 0);
  REQUIRE_FALSE(t.errors.empty());
  REQUIRE_THAT(t.errors.front(), Contains("stage 'sink' (sink)") && Contains("/nonexistent-dir/out.jsonl"));
}

TEST_CASE("a leaky queue drops batches for a slow consumer and counts them with the reason", "[pipeline]") {
  for (const char* policy : {"oldest", "newest"}) {
    INFO(policy);
    std::string yaml = small("pipelined", 400);
    yaml.replace(yaml.find("    frames: 400"), 15, "    frames: 400\n    leaky: " + std::string(policy) + "\n    queue_depth: 1");
    PipelinePlan plan = plan_from(yaml);
    plan.stages[1].stage = std::make_unique<SlowForward>(plan.stages[1].output);
    PipelineSnapshot snap;
    auto t = run_to_end(std::move(plan), &snap);
    REQUIRE(t.produced == 400);
    REQUIRE(t.dropped > 0);
    REQUIRE(t.dropped % 8 == 0);  // whole batches
    REQUIRE(t.delivered + t.dropped == 400);
    REQUIRE(t.failed == 0);
    REQUIRE(t.drop_reasons.size() == 1);
    REQUIRE_THAT(t.drop_reasons.begin()->first, Contains("queue after 'decode' full (leaky: " + std::string(policy)));
    REQUIRE(snap.stages[0].dropped == t.dropped);
  }
}

TEST_CASE("batch_timeout lets a partial batch leave when the next frame is too far off", "[pipeline]") {
  // 200 fps = a frame every 5 ms; with a 12 ms timeout a batch holds the frames due at 0, 5 and 10 ms.
  std::string yaml = small("pipelined", 20);
  yaml.replace(yaml.find("batch_size: 8"), 13, "batch_size: 8\nbatch_timeout_ms: 12");
  yaml.replace(yaml.find("    frames: 20"), 14, "    frames: 20\n    fps: 200");
  PipelineSnapshot snap;
  auto t = run_to_end(plan_from(yaml), &snap);
  REQUIRE(t.delivered == 20);
  REQUIRE(snap.stages[0].batches == 7);  // 6 batches of 3 and one of 2
  REQUIRE(snap.stages[4].batches == 7);
}

TEST_CASE("a paused pipeline produces nothing until resumed and drains what was in flight", "[pipeline]") {
  Pipeline p(plan_from(small("pipelined", 0)));
  p.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  p.set_paused(true);
  REQUIRE(p.paused());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the batch being made finishes, the rest drains
  const auto a = p.ledger().totals();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto b = p.ledger().totals();
  REQUIRE(a.produced == b.produced);
  REQUIRE(b.in_flight() == 0);
  p.set_paused(false);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(p.ledger().totals().produced > b.produced);
  p.set_paused(true);
  p.request_stop();  // a stop overrides a pause
  p.wait();
  REQUIRE(p.ledger().totals().in_flight() == 0);
}

// The stranded frame of fault_outputs: a pause that came while the source was making a batch looked settled
// (paused, nothing in flight), then the batch left and one frame was in flight, or on disk and not yet counted.
TEST_CASE("a pause holds once the batch being made has left the source: then every frame is settled and on disk",
          "[pipeline]") {
  const std::string path = "test_pipeline_pause.jsonl";
  std::atomic<bool> holding{false}, release{false};
  ScriptedSource* source = nullptr;
  auto p = with_source(
      [&](int call, StageContext& ctx) -> BatchLease {
        if (call > 2) return {};
        BatchLease b = one_frame(ctx, static_cast<std::uint64_t>(call - 1));
        if (call == 2) {  // a frame made, the batch not yet handed on (a source between frames)
          holding = true;
          while (!release && !ctx.stopping()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return b;
      },
      path, &source);
  p->start();
  REQUIRE(eventually([&] { return holding && p->ledger().totals().delivered == 1; }));
  p->set_paused(true);
  REQUIRE(p->paused());
  REQUIRE(p->ledger().totals().in_flight() == 0);  // the held frame is not counted yet...
  REQUIRE_FALSE(p->pause_taken());                 // ...so the pause must not claim to hold
  release = true;
  REQUIRE(eventually([&] { return p->pause_taken() && p->ledger().totals().in_flight() == 0; }));
  const auto t = p->ledger().totals();
  CHECK(t.produced == 2);
  CHECK(t.delivered == 2);
  CHECK(read_jsonl(path).size() == t.delivered);
  CHECK(source->calls == 2);  // waiting at the gate: asked for nothing while paused
  p->set_paused(false);
  p->wait();  // the third call ends the stream
  CHECK(p->ledger().totals().delivered == 2);
  CHECK(p->ledger().totals().in_flight() == 0);
  std::remove(path.c_str());
}

TEST_CASE("a source cut short by a pause with nothing made is asked again after the resume, not ended",
          "[pipeline]") {
  const std::string path = "test_pipeline_pause_empty.jsonl";
  std::atomic<bool> gave_up{false};
  ScriptedSource* source = nullptr;
  auto p = with_source(
      [&](int call, StageContext& ctx) -> BatchLease {
        if (call == 2) {  // waiting for a frame that has not come; the pause means: stop waiting
          while (!ctx.pausing() && !ctx.stopping()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          gave_up = true;
          return {};
        }
        return call <= 3 ? one_frame(ctx, static_cast<std::uint64_t>(call)) : BatchLease{};
      },
      path, &source);
  p->start();
  REQUIRE(eventually([&] { return source->calls == 2 && p->ledger().totals().delivered == 1; }));
  p->set_paused(true);
  REQUIRE(eventually([&] { return gave_up.load(); }));  // it stopped waiting, with nothing made
  REQUIRE(eventually([&] { return p->pause_taken() && p->ledger().totals().in_flight() == 0; }));
  CHECK_FALSE(p->finished());
  CHECK(source->calls == 2);
  p->set_paused(false);
  p->wait();
  const auto t = p->ledger().totals();
  CHECK(source->calls == 4);
  CHECK(t.produced == 2);
  CHECK(t.delivered == 2);
  CHECK(read_jsonl(path).size() == 2);
  std::remove(path.c_str());
}

TEST_CASE("an abandoned ledger counts the frames in flight failed once and ignores later updates", "[pipeline][ledger]") {
  // Frames of two sources: a..d from source 1, e from source 2.
  const auto frames = [](std::uint32_t source, int n) { return std::vector<FrameMeta>(n, FrameMeta{.source_id = source}); };
  FrameLedger ledger;
  ledger.produced(frames(1, 7));
  ledger.produced(frames(2, 3));
  ledger.delivered(frames(1, 4));
  ledger.dropped(frames(2, 1), "queue full");
  CHECK(ledger.abandon("drain timeout") == 5);
  ledger.delivered(frames(1, 3));  // a stuck sink thread that wakes up later
  ledger.produced(frames(2, 2));
  ledger.failed(frames(1, 1), "late");
  CHECK(ledger.abandon("again") == 0);
  const auto t = ledger.totals();
  CHECK(t.produced == 10);
  CHECK(t.delivered == 4);
  CHECK(t.failed == 5);
  CHECK(t.in_flight() == 0);
  CHECK(std::find(t.errors.begin(), t.errors.end(), "drain timeout") != t.errors.end());
  // Each source's row is settled too: 7 = 4 delivered + 3 failed, 3 = 1 dropped + 2 failed.
  REQUIRE(t.sources.size() == 2);
  CHECK(t.sources.at(1).produced == 7);
  CHECK(t.sources.at(1).delivered == 4);
  CHECK(t.sources.at(1).failed == 3);
  CHECK(t.sources.at(2).dropped == 1);
  CHECK(t.sources.at(2).failed == 2);
  for (const auto& [id, row] : t.sources) CHECK(row.in_flight() == 0);
}
